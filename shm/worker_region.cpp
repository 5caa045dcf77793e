#include "shm/worker_region.hpp"

#include <fmt/format.h>

#include "shm/align.hpp"

namespace batchd::shm {
namespace {

// Offsets in a batch are 32-bit: no area may pass 4 GiB.
constexpr std::uint64_t kMaxAreaBytes = std::uint64_t{1} << 31;
constexpr std::uint32_t kMaxInputs = std::uint32_t{1} << 20;

Failure unusable(std::string why) { return make_failure(std::errc::invalid_argument, std::move(why)); }

}  // namespace

Expected<WorkerRegionHeader> worker_region_layout(const WorkerRegionParams& p) {
  if (p.buffers == 0 || p.buffers > kMaxWorkerBuffers) {
    return unusable(fmt::format("a worker runs 1 to {} batches at once, not {}", kMaxWorkerBuffers, p.buffers));
  }
  if (p.max_inputs == 0 || p.max_inputs > kMaxInputs) {
    return unusable(fmt::format("a worker batch holds 1 to {} inputs, not {}", kMaxInputs, p.max_inputs));
  }
  if (p.max_input_bytes == 0 || p.max_input_bytes > kMaxAreaBytes || p.output_capacity == 0 ||
      p.output_capacity > kMaxAreaBytes || p.max_output_bytes == 0 || p.max_output_bytes > p.output_capacity) {
    return unusable(fmt::format("worker buffer sizes out of range (inputs {} bytes, outputs {} bytes, one "
                               "output {} bytes)",
                               p.max_input_bytes, p.output_capacity, p.max_output_bytes));
  }
  WorkerRegionHeader h{};
  h.magic = kWorkerRegionMagic;
  h.version = kWorkerRegionVersion;
  h.buffers = p.buffers;
  h.max_inputs = p.max_inputs;
  h.max_input_bytes = p.max_input_bytes;
  h.output_capacity = p.output_capacity;
  h.max_output_bytes = p.max_output_bytes;
  h.descriptors_offset = round_up(sizeof(WorkerRegionHeader), kCacheLine);
  h.buffer_offset = round_up(h.descriptors_offset + sizeof(WorkerDescriptor) * p.buffers, kPageBytes);
  const std::uint64_t offsets_bytes = (std::uint64_t{p.max_inputs} + 1) * sizeof(std::uint32_t);
  h.input_offsets_at = 0;
  h.input_bytes_at = round_up(offsets_bytes, kCacheLine);
  h.output_offsets_at = round_up(h.input_bytes_at + p.max_input_bytes, kCacheLine);
  h.output_bytes_at = round_up(h.output_offsets_at + offsets_bytes, kCacheLine);
  h.buffer_stride = round_up(h.output_bytes_at + p.output_capacity, kPageBytes);
  h.region_bytes = h.buffer_offset + h.buffer_stride * p.buffers;
  return h;
}

Expected<void> check_worker_region(const WorkerRegionHeader& header, std::uint64_t region_bytes) {
  if (header.magic != kWorkerRegionMagic || header.version != kWorkerRegionVersion) {
    return make_failure(std::errc::protocol_error,
                        fmt::format("worker region version {} (magic {:#x}); this build speaks {}",
                                    header.version, header.magic, kWorkerRegionVersion));
  }
  auto expected = worker_region_layout({header.buffers, header.max_inputs, header.max_input_bytes,
                                        header.output_capacity, header.max_output_bytes});
  if (!expected) return expected.error();
  const WorkerRegionHeader& e = *expected;
  const bool same = e.descriptors_offset == header.descriptors_offset && e.buffer_offset == header.buffer_offset &&
                    e.buffer_stride == header.buffer_stride && e.input_offsets_at == header.input_offsets_at &&
                    e.input_bytes_at == header.input_bytes_at && e.output_offsets_at == header.output_offsets_at &&
                    e.output_bytes_at == header.output_bytes_at && e.region_bytes == header.region_bytes;
  if (!same || header.region_bytes > region_bytes) {
    return make_failure(std::errc::protocol_error,
                        fmt::format("worker region layout does not match its file ({} bytes, header says {})",
                                    region_bytes, header.region_bytes));
  }
  return {};
}

}  // namespace batchd::shm

#include "shm/layout.hpp"

#include <fmt/format.h>

#include "shm/align.hpp"

namespace batchd::shm {
namespace {

Failure invalid(std::string why) {
  return make_failure(std::errc::invalid_argument, std::move(why));
}

// A header this build will not map.
Failure refused(std::string why) {
  return make_failure(std::errc::protocol_error, std::move(why));
}

}  // namespace

Expected<void> check_params(const SegmentParams& params) {
  const auto slots = params.slot_count;
  if (slots == 0 || slots > kMaxSlots || (slots & (slots - 1)) != 0) {
    return invalid(fmt::format("slot count {} must be a power of two between 1 and {}", slots,
                               kMaxSlots));
  }
  if (params.max_input_bytes == 0 || params.max_input_bytes > kMaxPayloadBytes) {
    return invalid(fmt::format("max input bytes {} must be between 1 and {}",
                               params.max_input_bytes, kMaxPayloadBytes));
  }
  if (params.max_output_bytes < 256 || params.max_output_bytes > kMaxPayloadBytes) {
    // 256 bytes is the room an error message needs.
    return invalid(fmt::format("max output bytes {} must be between 256 and {}",
                               params.max_output_bytes, kMaxPayloadBytes));
  }
  return {};
}

Geometry compute_geometry(const SegmentParams& params) noexcept {
  Geometry g;
  g.params = params;
  g.event_waiter_offset = sizeof(SegmentHeader);
  g.cache_hits_offset = g.event_waiter_offset + sizeof(EventWaiter);
  g.ring_offset = g.cache_hits_offset + sizeof(CacheHitCounts);
  const std::uint64_t ring_bytes = sizeof(RingTail) + sizeof(RingEntry) * params.slot_count;
  g.request_slots_offset = round_up(g.ring_offset + ring_bytes, kCacheLine);
  g.request_slot_stride = round_up(sizeof(RequestSlotHeader) + params.max_input_bytes, kCacheLine);
  g.request_region_bytes =
      round_up(g.request_slots_offset + g.request_slot_stride * params.slot_count, kPageBytes);
  g.completion_events_offset = sizeof(CompletionHeader);
  g.finished_offset = g.completion_events_offset + sizeof(CompletionEvents);
  const std::uint64_t finished_bytes =
      sizeof(FinishedTail) + sizeof(RingEntry) * std::uint64_t{kFinishedPerSlot} * params.slot_count;
  g.completion_slots_offset = round_up(g.finished_offset + finished_bytes, kCacheLine);
  g.completion_slot_stride =
      round_up(sizeof(CompletionSlotHeader) + params.max_output_bytes, kCacheLine);
  g.completion_region_bytes = round_up(
      g.completion_slots_offset + g.completion_slot_stride * params.slot_count, kPageBytes);
  return g;
}

SegmentHeader make_header(const Geometry& g) noexcept {
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.layout_version = kLayoutVersion;
  h.header_bytes = sizeof(SegmentHeader);
  h.slot_count = g.params.slot_count;
  h.max_input_bytes = g.params.max_input_bytes;
  h.max_output_bytes = g.params.max_output_bytes;
  h.request_region_bytes = g.request_region_bytes;
  h.completion_region_bytes = g.completion_region_bytes;
  h.ring_offset = g.ring_offset;
  h.request_slots_offset = g.request_slots_offset;
  h.request_slot_stride = g.request_slot_stride;
  h.completion_slots_offset = g.completion_slots_offset;
  h.completion_slot_stride = g.completion_slot_stride;
  return h;
}

Expected<Geometry> validate_header(const SegmentHeader& h, std::uint64_t request_region_bytes,
                                   std::uint64_t completion_region_bytes) {
  if (h.magic != kSegmentMagic) {
    return refused(fmt::format("bad segment magic {:#x}: not a batchd segment", h.magic));
  }
  if (h.layout_version != kLayoutVersion || h.header_bytes != sizeof(SegmentHeader)) {
    return refused(fmt::format(
        "segment layout version {} (header {} bytes) but this build speaks {} ({} bytes)",
        h.layout_version, h.header_bytes, kLayoutVersion, sizeof(SegmentHeader)));
  }
  const SegmentParams params{h.slot_count, h.max_input_bytes, h.max_output_bytes};
  if (auto usable = check_params(params); !usable) {
    return refused("segment sizes out of range: " + usable.error().message);
  }
  // Every derived offset must equal what this build computes: a header that disagrees on any of
  // them was written by another layout, whatever its version says.
  const Geometry g = compute_geometry(params);
  const SegmentHeader expected = make_header(g);
  if (h.request_region_bytes != expected.request_region_bytes ||
      h.completion_region_bytes != expected.completion_region_bytes ||
      h.ring_offset != expected.ring_offset ||
      h.request_slots_offset != expected.request_slots_offset ||
      h.request_slot_stride != expected.request_slot_stride ||
      h.completion_slots_offset != expected.completion_slots_offset ||
      h.completion_slot_stride != expected.completion_slot_stride) {
    return refused("segment header offsets disagree with its sizes");
  }
  if (request_region_bytes != g.request_region_bytes ||
      completion_region_bytes != g.completion_region_bytes) {
    return refused(fmt::format("segment regions are {} and {} bytes but the header needs {} and {}",
                               request_region_bytes, completion_region_bytes,
                               g.request_region_bytes, g.completion_region_bytes));
  }
  return g;
}

}  // namespace batchd::shm

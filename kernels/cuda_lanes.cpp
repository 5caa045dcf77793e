#include "kernels/cuda_lanes.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <new>
#include <string>

#include "kernels/cuda_check.hpp"
#include "backend/reference_batchstring.hpp"

namespace batchd::cuda {
namespace {

namespace bip = boost::interprocess;

// Copies start faster from 256-byte aligned buffers, and it matches cudaMalloc's alignment.
constexpr std::size_t kAlignment = 256;
// managed_external_buffer's own bookkeeping: its segment manager at the start of the block and
// a header per allocation, plus what aligning each allocation may waste.
constexpr std::size_t kHeapOverheadBytes = 16 * 1024;
constexpr std::size_t kPerAllocationSlackBytes = kAlignment + 128;
constexpr std::size_t kAllocationsPerLane = 3;

std::size_t round_up(std::size_t bytes) noexcept {
  return (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

struct LaneSizes {
  std::size_t bytes, offsets, out;
};

LaneSizes lane_sizes(BatchLimits limits) noexcept {
  return {round_up(limits.max_bytes),
          round_up((std::size_t{limits.max_inputs} + 1) * sizeof(std::uint32_t)),
          round_up(std::size_t{limits.max_inputs} * kDigestHexBytes)};
}

}  // namespace

DeviceLanes::~DeviceLanes() {
  // Every call is tried even after an error: after a sticky error most will fail, but whatever
  // can still be given back is.
  (void)cudaSetDevice(ordinal_);
  for (Lane& lane : lanes_) {
    if (lane.stream != nullptr) (void)cudaStreamSynchronize(lane.stream);
    if (lane.done != nullptr) (void)cudaEventDestroy(lane.done);
    if (lane.stream != nullptr) (void)cudaStreamDestroy(lane.stream);
    (void)cudaFree(lane.device_bytes);
    (void)cudaFree(lane.device_offsets);
    (void)cudaFree(lane.device_out);
  }
  pinned_heap_.reset();  // it lives inside the block: drop it before the block goes
  if (pinned_block_ != nullptr) (void)cudaFreeHost(pinned_block_);
}

BackendStatus DeviceLanes::read_shape() {
  const std::string where = "cuda device " + std::to_string(ordinal_);
  BATCHD_RETURN_IF_CUDA_ERR(track(cudaSetDevice(ordinal_)), where + ": cudaSetDevice");
  BATCHD_RETURN_IF_CUDA_ERR(track(kernels::query_launch_shape(shape_)),
                            where + ": reading the kernel's occupancy");
  return BackendStatus::success();
}

BackendStatus DeviceLanes::init(unsigned streams, BatchLimits limits) {
  const std::string where = "cuda device " + std::to_string(ordinal_);
  BATCHD_RETURN_IF_CUDA_ERR(cudaSetDevice(ordinal_), where + ": cudaSetDevice");
  lanes_.resize(streams);
  BATCHD_RETURN_IF_FAILED(init_pinned(streams, limits));
  for (Lane& lane : lanes_) BATCHD_RETURN_IF_FAILED(init_lane(lane, limits));
  return BackendStatus::success();
}

// One pinned block for the device, carved into each lane's three host buffers.
BackendStatus DeviceLanes::init_pinned(unsigned streams, BatchLimits limits) {
  const LaneSizes sizes = lane_sizes(limits);
  const std::size_t per_lane =
      sizes.bytes + sizes.offsets + sizes.out + kAllocationsPerLane * kPerAllocationSlackBytes;
  const std::size_t block_bytes = kHeapOverheadBytes + per_lane * streams;
  const std::string where = "cuda device " + std::to_string(ordinal_);
  BATCHD_RETURN_IF_CUDA_ERR(cudaHostAlloc(&pinned_block_, block_bytes, cudaHostAllocDefault),
                            where + ": cudaHostAlloc of " + std::to_string(block_bytes) + " bytes");
  pinned_heap_ =
      std::make_unique<bip::managed_external_buffer>(bip::create_only, pinned_block_, block_bytes);
  auto carve = [this](std::size_t bytes) {
    return pinned_heap_->allocate_aligned(bytes, kAlignment, std::nothrow);
  };
  for (Lane& lane : lanes_) {
    lane.host_bytes = static_cast<char*>(carve(sizes.bytes));
    lane.host_offsets = static_cast<std::uint32_t*>(carve(sizes.offsets));
    lane.host_out = static_cast<char*>(carve(sizes.out));
    if (lane.host_bytes == nullptr || lane.host_offsets == nullptr || lane.host_out == nullptr) {
      return BackendStatus::failure(where + ": the pinned block of " + std::to_string(block_bytes) +
                                    " bytes is too small for its lanes (sizing bug)");
    }
  }
  return BackendStatus::success();
}

BackendStatus DeviceLanes::init_lane(Lane& lane, BatchLimits limits) {
  const LaneSizes sizes = lane_sizes(limits);
  const std::string where = "cuda device " + std::to_string(ordinal_);
  BATCHD_RETURN_IF_CUDA_ERR(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking),
                            where + ": cudaStreamCreate");
  // No timing: the event only marks completion, and timing makes record and query dearer.
  BATCHD_RETURN_IF_CUDA_ERR(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming),
                            where + ": cudaEventCreate");
  BATCHD_RETURN_IF_CUDA_ERR(cudaMalloc(&lane.device_bytes, sizes.bytes), where + ": cudaMalloc");
  BATCHD_RETURN_IF_CUDA_ERR(cudaMalloc(&lane.device_offsets, sizes.offsets),
                            where + ": cudaMalloc");
  BATCHD_RETURN_IF_CUDA_ERR(cudaMalloc(&lane.device_out, sizes.out), where + ": cudaMalloc");
  return BackendStatus::success();
}

}  // namespace batchd::cuda

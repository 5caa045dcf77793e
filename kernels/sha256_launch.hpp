// Host entry points of the batchstring kernel. Internal to the cuda backend (and its tests and
// benchmark): they need the CUDA runtime headers, which kernels/cuda_backend.hpp keeps out.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

namespace batchd::kernels {

// Threads in a warp: the unit of blocks and of the batches sized to fill a device.
inline constexpr std::uint32_t kWarpThreads = 32;

// How the kernel fits one device, read once per device at start (query_launch_shape).
struct LaunchShape {
  std::uint32_t multiprocessors = 1;
  std::uint32_t max_blocks_per_multiprocessor = 16;  // resident blocks an SM holds at most
  std::uint32_t max_threads_per_block = 32;  // the kernel's own limit there (its registers)
  // Threads of this kernel the whole device runs at once, at its best block size: a batch
  // larger than this runs in more than one wave.
  std::uint32_t resident_threads = 32;
};

// The shape of the current device.
cudaError_t query_launch_shape(LaunchShape& shape) noexcept;

// Threads per block for a batch of `count` inputs (one thread each). One warp per block spreads
// a batch over the most multiprocessors (a batch of 4,096 reaches 128 SMs, where blocks of 256
// would crowd 16); blocks grow only when one-warp blocks would be more than the SMs can hold at
// once, and never past the kernel's own limit.
constexpr std::uint32_t threads_per_block(std::uint32_t count, const LaunchShape& shape) noexcept {
  constexpr std::uint64_t kWarp = kWarpThreads;
  const std::uint64_t slots = std::max<std::uint64_t>(
      1, std::uint64_t{shape.multiprocessors} * shape.max_blocks_per_multiprocessor);
  const std::uint64_t warps = (std::uint64_t{count} + kWarp - 1) / kWarp;
  const std::uint64_t warps_per_block = std::max<std::uint64_t>(1, (warps + slots - 1) / slots);
  const std::uint64_t limit = std::max<std::uint64_t>(kWarp, shape.max_threads_per_block / kWarp * kWarp);
  return static_cast<std::uint32_t>(std::min(warps_per_block * kWarp, limit));
}

// Enqueues the batchstring of `count` inputs on `stream`, shaped for its device: input i is
// device_bytes[device_offsets[i], device_offsets[i + 1]), and its kDigestHexBytes-character answer
// goes to device_out + i * kDigestHexBytes. All pointers are device memory from cudaMalloc, with
// the byte buffer's size a multiple of 4 (the kernel reads inputs in aligned words); `cost` >= 1.
// Returns the launch error, if any (errors while the kernel runs surface on the stream).
cudaError_t launch_batchstring(const char* device_bytes, const std::uint32_t* device_offsets,
                               std::uint32_t count, unsigned cost, char* device_out,
                               const LaunchShape& shape, cudaStream_t stream) noexcept;

}  // namespace batchd::kernels

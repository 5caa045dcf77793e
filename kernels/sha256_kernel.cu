// The batchstring kernel: one thread per input, each running the iterated SHA-256 of
// sha256_kernel.cuh over its own bytes and writing 64 hex characters; and how it is shaped for a
// device (docs/GPU.md has the throughput model behind it).
#include "kernels/sha256_kernel.cuh"
#include "kernels/sha256_launch.hpp"

namespace batchd::kernels {
namespace {

// The one definition of the device's round constants (see sha256::HostRoundConstants for why
// here): the constant cache serves a warp that reads the same word in one go.
__constant__ std::uint32_t kRoundConstants[64] = {BATCHD_SHA256_ROUND_CONSTANTS};

struct DeviceRoundConstants {
  __device__ static std::uint32_t at(int t) { return kRoundConstants[t]; }
};

__global__ void batchstring_kernel(const char* __restrict__ bytes,
                                   const std::uint32_t* __restrict__ offsets, std::uint32_t count,
                                   unsigned cost, char* __restrict__ out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::uint32_t begin = offsets[i];
  const std::uint32_t length = offsets[i + 1] - begin;
  sha256::batchstring_one<DeviceRoundConstants>(
      reinterpret_cast<const unsigned char*>(bytes) + begin, length, cost,
      out + std::size_t{i} * sha256::kDigestHexChars);
}

}  // namespace

cudaError_t query_launch_shape(LaunchShape& shape) noexcept {
  int device = 0;
  int multiprocessors = 0;
  int max_blocks = 0;
  int min_grid = 0;
  int best_block = 0;
  cudaFuncAttributes attributes{};
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&max_blocks, cudaDevAttrMaxBlocksPerMultiprocessor, device);
  }
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attributes, batchstring_kernel);
  // The grid that reaches the kernel's highest occupancy, at the block size that does: together,
  // how many of its threads the device holds at once.
  if (err == cudaSuccess) {
    err = cudaOccupancyMaxPotentialBlockSize(&min_grid, &best_block, batchstring_kernel);
  }
  if (err != cudaSuccess) return err;
  shape.multiprocessors = static_cast<std::uint32_t>(std::max(multiprocessors, 1));
  shape.max_blocks_per_multiprocessor = static_cast<std::uint32_t>(std::max(max_blocks, 1));
  shape.max_threads_per_block = static_cast<std::uint32_t>(std::max(attributes.maxThreadsPerBlock, 32));
  shape.resident_threads = static_cast<std::uint32_t>(std::max(min_grid * best_block, 32));
  return cudaSuccess;
}

cudaError_t launch_batchstring(const char* device_bytes, const std::uint32_t* device_offsets,
                               std::uint32_t count, unsigned cost, char* device_out,
                               const LaunchShape& shape, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  const std::uint32_t threads = threads_per_block(count, shape);
  const std::uint32_t blocks = (count + threads - 1) / threads;
  batchstring_kernel<<<blocks, threads, 0, stream>>>(device_bytes, device_offsets, count, cost,
                                                     device_out);
  return cudaGetLastError();
}

}  // namespace batchd::kernels

// The batchstring kernel: one thread per input, each running the iterated SHA-256 of
// sha256_kernel.cuh over its own bytes and writing 64 hex characters.
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

// One warp per block: a batch of 4096 inputs then spreads over 128 blocks, about one per SM of
// an H100/H200, instead of crowding onto a few SMs while the rest idle.
constexpr unsigned kThreadsPerBlock = 32;

__global__ void batchstring_kernel(const char* __restrict__ bytes,
                                   const std::uint32_t* __restrict__ offsets, std::uint32_t count,
                                   unsigned cost, char* __restrict__ out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::uint32_t begin = offsets[i];
  const std::uint32_t length = offsets[i + 1] - begin;
  sha256::batchstring_one<DeviceRoundConstants>(reinterpret_cast<const unsigned char*>(bytes) + begin, length, cost,
                          out + std::size_t{i} * sha256::kDigestHexChars);
}

}  // namespace

cudaError_t launch_batchstring(const char* device_bytes, const std::uint32_t* device_offsets,
                               std::uint32_t count, unsigned cost, char* device_out,
                               cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  const unsigned blocks = (count + kThreadsPerBlock - 1) / kThreadsPerBlock;
  batchstring_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(device_bytes, device_offsets, count,
                                                              cost, device_out);
  return cudaGetLastError();
}

}  // namespace batchd::kernels

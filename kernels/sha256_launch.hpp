// Host entry point of the batchstring kernel. Internal to the cuda backend (and its tests and
// benchmark): it needs the CUDA runtime headers, which kernels/cuda_backend.hpp keeps out.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace batchd::kernels {

// Enqueues the batchstring of `count` inputs on `stream`: input i is
// device_bytes[device_offsets[i], device_offsets[i + 1]), and its kDigestHexBytes-character answer
// goes to device_out + i * kDigestHexBytes. All pointers are device memory; `cost` >= 1.
// Returns the launch error, if any (errors while the kernel runs surface on the stream).
cudaError_t launch_batchstring(const char* device_bytes, const std::uint32_t* device_offsets,
                               std::uint32_t count, unsigned cost, char* device_out,
                               cudaStream_t stream) noexcept;

}  // namespace batchd::kernels

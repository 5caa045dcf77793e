// The cuda backend: batchstring on one or more GPUs, several streams per device so that one
// batch's copies overlap another's kernel. Plain C++: no CUDA header is included here, so daemon
// code compiled by g++ can include it (only where meson found CUDA: BATCHD_HAVE_CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "base/expected.hpp"

namespace batchd {

// The largest batch max_batch_fills_devices makes: 65,536 inputs is 4 MiB of answers per
// stream, pinned and on the device.
inline constexpr std::uint32_t kMaxFillBatch = 65'536;

struct CudaBackendOptions {
  std::vector<int> devices;                  // CUDA device ordinals to use; empty: all visible ones
  unsigned streams_per_device = 2;           // lanes per device; 2 lets consecutive batches overlap
  unsigned cost = 1;                         // SHA-256 rounds per input (the "model cost")
  std::uint32_t max_batch = 64;              // most inputs in one batch; sizes the pinned buffers
  // max_batch is only a floor: each stream's batches may grow to what fills a device together
  // with the other streams' (the kernel's resident threads / streams, the smallest device's),
  // up to kMaxFillBatch. For a daemon not told a batch size: at a high cost a GPU is kept busy
  // only by many inputs at once (docs/GPU.md).
  bool max_batch_fills_devices = false;
  std::uint64_t max_batch_bytes = 8u << 20;  // most input bytes in one batch; likewise (< 4 GiB)
};

// Number of visible CUDA devices (at least 1), or ENODEV and why there is none. Any error from
// the CUDA runtime counts as "no GPU" (without a driver the runtime reports "CUDA driver version
// is insufficient for CUDA runtime version", not zero devices).
Expected<int> cuda_device_count() noexcept;

// Allocates every stream, event, pinned host buffer and device buffer up front and runs a
// one-input self-test on each device, so a missing kernel image or a broken device shows here
// rather than on the first batch. Fails with EINVAL for unusable options, ENODEV for missing
// devices and EIO for a device that failed its set-up or self-test.
// The backend's run() rejects (as a failed status, never by allocating) a batch larger than
// max_batch inputs or max_batch_bytes bytes.
Expected<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

}  // namespace batchd

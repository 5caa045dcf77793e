// The memory and CUDA objects behind the cuda backend's lanes, all made once at start-up so
// that running a batch allocates nothing. Internal to kernels/.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <boost/interprocess/managed_external_buffer.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/sha256_launch.hpp"

namespace batchd::cuda {

// The largest batch a lane takes; every buffer is sized from it.
struct BatchLimits {
  std::uint32_t max_inputs = 0;  // inputs per batch
  std::uint32_t max_bytes = 0;   // input bytes per batch (offsets are 32-bit)
};

// One (device, stream) lane: a batch is staged in the pinned buffers, copied to the device
// buffers, hashed, copied back, and `done` is recorded after the last copy. Pointers borrow
// memory owned by the DeviceLanes that holds the lane. Used by one thread at a time (the router
// runs one batch per lane).
struct Lane {
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  // A batch was abandoned (shutdown, or an error after its first copy was queued): the stream
  // may still be using the buffers, so the next batch first waits for the stream.
  bool in_flight = false;
  char* host_bytes = nullptr;             // pinned, max_bytes
  std::uint32_t* host_offsets = nullptr;  // pinned, max_inputs + 1
  char* host_out = nullptr;               // pinned, max_inputs * 64
  char* device_bytes = nullptr;           // the device copies, same sizes
  std::uint32_t* device_offsets = nullptr;
  char* device_out = nullptr;
};

// All lanes of one device and the memory they use. The pinned host memory is one cudaHostAlloc
// block per device, carved into the lanes' buffers with Boost.Interprocess's
// managed_external_buffer (as Triton's pinned memory manager does).
class DeviceLanes {
 public:
  explicit DeviceLanes(int ordinal) noexcept : ordinal_(ordinal) {}
  DeviceLanes(const DeviceLanes&) = delete;
  DeviceLanes& operator=(const DeviceLanes&) = delete;
  // Waits for the streams, then frees everything this object made (errors ignored: a device
  // with a sticky error still gives its host memory back).
  ~DeviceLanes();

  // Reads how the kernel fits this device (before init: the batch limits may follow it).
  BackendStatus read_shape();
  // Makes `streams` lanes sized for `limits`. Call once, before any lane() use.
  BackendStatus init(unsigned streams, BatchLimits limits);

  [[nodiscard]] int ordinal() const noexcept { return ordinal_; }
  [[nodiscard]] const kernels::LaunchShape& shape() const noexcept { return shape_; }
  [[nodiscard]] Lane& lane(unsigned stream) noexcept { return lanes_[stream]; }

  // Passes a runtime call's result through, remembering a sticky one (cuda::is_sticky): from
  // then on the device is lost for good. Any thread.
  cudaError_t track(cudaError_t err) noexcept {
    if (is_sticky(err)) {
      cudaError_t none = cudaSuccess;
      lost_error_.compare_exchange_strong(none, err, std::memory_order_acq_rel);
    }
    return err;
  }
  // The sticky error that lost the device, or cudaSuccess while it is usable. Any thread.
  [[nodiscard]] cudaError_t lost_error() const noexcept {
    return lost_error_.load(std::memory_order_acquire);
  }

 private:
  BackendStatus init_pinned(unsigned streams, BatchLimits limits);
  BackendStatus init_lane(Lane& lane, BatchLimits limits);

  int ordinal_;                   // CUDA device ordinal
  kernels::LaunchShape shape_;    // read_shape()
  void* pinned_block_ = nullptr;  // the cudaHostAlloc block that pinned_heap_ carves
  std::unique_ptr<boost::interprocess::managed_external_buffer> pinned_heap_;
  std::vector<Lane> lanes_;  // one per stream
  std::atomic<cudaError_t> lost_error_{cudaSuccess};  // the first sticky error seen here
};

}  // namespace batchd::cuda

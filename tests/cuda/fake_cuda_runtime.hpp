// A stand-in for the few CUDA runtime calls the cuda backend makes, so its host logic (pinned
// buffer carving, staging, limits, event polling, errors, shutdown) runs in a test on a machine
// without a GPU. "Device" memory is host memory, copies and the kernel (the same
// sha256_kernel.cuh arithmetic, on the CPU) run at once, and events can be told to stay
// not-ready for a while, forever, or to fail with a sticky error (on every device or on one),
// at once or from a kernel launch that faults.
// Failed calls leave their error for cudaGetLastError, per thread, as the runtime does.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "kernels/sha256_launch.hpp"

namespace fake_cuda {

// What the fake runtime does; tests set it before making a backend and between batches. The
// errors and never_ready are atomics: a test sets them while a whole daemon's lanes run batches.
struct Control {
  static constexpr int kMaxDevices = 8;
  int device_count = 1;
  cudaError_t device_count_error = cudaSuccess;  // what cudaGetDeviceCount returns
  int polls_before_ready = 0;  // cudaEventQuery answers NotReady this often after a record
  std::atomic<bool> never_ready{false};  // cudaEventQuery answers NotReady until this is cleared
  std::atomic<cudaError_t> sticky_error{cudaSuccess};  // once set, every later call returns it
  // Likewise for one device: every later call while it is the current device returns it.
  std::atomic<cudaError_t> device_sticky_error[kMaxDevices] = {};
  // The next cudaMemcpyAsync fails with this (then it is cleared); like the runtime, the error
  // also stays behind for the thread's next cudaGetLastError (and so for the next launch).
  cudaError_t fail_next_copy = cudaSuccess;
  bool corrupt_answers = false;            // the fake kernel writes wrong answers
  // A kernel launched while a file of this name exists faults, as on an illegal access: the
  // launch is accepted, then sticky_error becomes cudaErrorIllegalAddress and every device is
  // lost. Lets a test outside the process choose the moment (fake_cuda_env.cpp). nullptr: never.
  const char* fault_file = nullptr;
  int last_launch_device = -1;             // the device current at the last kernel launch
  int launches = 0;
  unsigned last_launch_cost = 0;           // the rounds the last kernel launch was asked for
  // How the last launch was shaped, and the most inputs one launch was given: atomics, as a test
  // reads them while a daemon's lanes launch.
  std::atomic<std::uint32_t> last_launch_threads_per_block{0};
  std::atomic<std::uint32_t> largest_launch{0};
  // What query_launch_shape answers, for every device: a small GPU (4 SMs, 16 blocks each,
  // 1,024 threads resident).
  batchd::kernels::LaunchShape shape{4, 16, 1024, 1024};
  cudaError_t shape_error = cudaSuccess;   // query_launch_shape fails with this
  // What cudaMemGetInfo answers for the device current at the call.
  size_t memory_free[kMaxDevices] = {};
  size_t memory_total[kMaxDevices] = {};
  cudaError_t memory_error = cudaSuccess;
};

// Resets the control to its defaults, and the calling thread's last error, and returns it. Not thread-safe against running batches.
Control& reset();
Control& control();

}  // namespace fake_cuda

// A stand-in for the few CUDA runtime calls the cuda backend makes, so its host logic (pinned
// buffer carving, staging, limits, event polling, errors, shutdown) runs in a test on a machine
// without a GPU. "Device" memory is host memory, copies and the kernel (the same
// sha256_kernel.cuh arithmetic, on the CPU) run at once, and events can be told to stay
// not-ready for a while, forever, or to fail with a sticky error.
#pragma once

#include <cuda_runtime_api.h>

namespace fake_cuda {

// What the fake runtime does; tests set it before making a backend and between batches.
struct Control {
  int device_count = 1;
  cudaError_t device_count_error = cudaSuccess;  // what cudaGetDeviceCount returns
  int polls_before_ready = 0;  // cudaEventQuery answers NotReady this often after a record
  bool never_ready = false;    // cudaEventQuery answers NotReady until this is cleared
  cudaError_t sticky_error = cudaSuccess;  // once set, every later call returns it
  bool corrupt_answers = false;            // the fake kernel writes wrong answers
  int last_launch_device = -1;             // the device current at the last kernel launch
  int launches = 0;
  // What cudaMemGetInfo answers for the device current at the call.
  static constexpr int kMaxDevices = 8;
  size_t memory_free[kMaxDevices] = {};
  size_t memory_total[kMaxDevices] = {};
  cudaError_t memory_error = cudaSuccess;
};

// Resets the control to its defaults and returns it. Not thread-safe against running batches.
Control& reset();
Control& control();

}  // namespace fake_cuda

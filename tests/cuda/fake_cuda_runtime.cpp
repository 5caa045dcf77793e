#include "tests/cuda/fake_cuda_runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "kernels/sha256_kernel.cuh"
#include "kernels/sha256_launch.hpp"

// The runtime's opaque handle types, given a body here (the headers only declare them).
struct CUevent_st {
  std::atomic<int> polls_left{0};
};
struct CUstream_st {
  int device = 0;
};

namespace fake_cuda {
namespace {

// Constant-initialized, so that code run before main() in other files (fake_cuda_env.cpp) may
// set it whatever the order of static initialization.
constinit Control g_control;
std::mutex g_launch_lock;       // lanes launch from several threads; the counters are shared
thread_local int t_device = 0;  // like the runtime, the current device is per host thread
thread_local cudaError_t t_last_error = cudaSuccess;  // what cudaGetLastError answers

cudaError_t sticky() {
  if (const cudaError_t all = g_control.sticky_error; all != cudaSuccess) return all;
  const bool known = t_device >= 0 && t_device < Control::kMaxDevices;
  return known ? g_control.device_sticky_error[t_device].load() : cudaSuccess;
}

bool launch_faults() {
  const char* path = g_control.fault_file;
  return path != nullptr && ::access(path, F_OK) == 0;
}

// A call's result, remembered for cudaGetLastError when it is an error.
cudaError_t answer(cudaError_t err) {
  if (err != cudaSuccess) t_last_error = err;
  return err;
}

}  // namespace

Control& control() { return g_control; }
Control& reset() {
  // Atomics cannot be assigned as a whole: the control is made anew in place (no batch runs at a
  // reset).
  g_control.~Control();
  new (&g_control) Control{};
  t_last_error = cudaSuccess;  // an earlier test's error on this thread
  return g_control;
}

}  // namespace fake_cuda

using fake_cuda::g_control;

extern "C" {

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorInvalidValue:
      return "invalid argument";
    default:
      return "fake cuda error";
  }
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    default:
      return "cudaErrorUnknown";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = g_control.device_count_error == cudaSuccess ? g_control.device_count : 0;
  return g_control.device_count_error;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= g_control.device_count) return cudaErrorInvalidDevice;
  fake_cuda::t_device = device;
  return fake_cuda::answer(fake_cuda::sticky());
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int /*flags*/) {
  *ptr = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  *ptr = std::aligned_alloc(256, (size + 255) / 256 * 256);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
  *stream = new CUstream_st{fake_cuda::t_device};
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t /*stream*/) {
  return fake_cuda::answer(fake_cuda::sticky());
}

// A sticky error stays; any other is cleared by being read.
cudaError_t cudaGetLastError() {
  const cudaError_t err = fake_cuda::t_last_error;
  fake_cuda::t_last_error = fake_cuda::sticky();
  return err != cudaSuccess ? err : fake_cuda::sticky();
}

cudaError_t cudaPeekAtLastError() {
  return fake_cuda::t_last_error != cudaSuccess ? fake_cuda::t_last_error : fake_cuda::sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t /*stream*/) {
  event->polls_left = g_control.polls_before_ready;
  return fake_cuda::answer(fake_cuda::sticky());
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (fake_cuda::sticky() != cudaSuccess) return fake_cuda::answer(fake_cuda::sticky());
  if (g_control.never_ready) return cudaErrorNotReady;
  return event->polls_left.fetch_sub(1) > 0 ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind /*kind*/,
                            cudaStream_t /*stream*/) {
  if (fake_cuda::sticky() != cudaSuccess) return fake_cuda::answer(fake_cuda::sticky());
  if (const cudaError_t fail = g_control.fail_next_copy; fail != cudaSuccess) {
    g_control.fail_next_copy = cudaSuccess;
    return fake_cuda::answer(fail);
  }
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

// Used by bench/gpu_check (a smoke run of it against this fake), not by the backend.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind /*kind*/) {
  std::memcpy(dst, src, count);
  return fake_cuda::sticky();
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventSynchronize(cudaEvent_t /*event*/) { return fake_cuda::sticky(); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t /*start*/, cudaEvent_t /*end*/) {
  *ms = 1.0F;
  return fake_cuda::sticky();
}

cudaError_t cudaGetDevice(int* device) {
  *device = fake_cuda::t_device;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (g_control.memory_error != cudaSuccess) return g_control.memory_error;
  const int device = fake_cuda::t_device;
  const bool known = device >= 0 && device < fake_cuda::Control::kMaxDevices;
  *free_bytes = known ? g_control.memory_free[device] : 0;
  *total_bytes = known ? g_control.memory_total[device] : 0;
  return fake_cuda::sticky();
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int /*device*/) {
  *props = cudaDeviceProp{};
  std::strcpy(props->name, "fake \"GPU\"");
  props->major = 9;
  props->multiProcessorCount = 1;
  return cudaSuccess;
}

}  // extern "C"

namespace batchd::kernels {

cudaError_t query_launch_shape(LaunchShape& shape) noexcept {
  if (const cudaError_t err = fake_cuda::sticky(); err != cudaSuccess) return err;
  if (g_control.shape_error != cudaSuccess) return g_control.shape_error;
  shape = g_control.shape;
  return cudaSuccess;
}

// The kernel's arithmetic, one input after another on the CPU. Like the real launch, it answers
// cudaGetLastError(): an earlier call's error left on this thread is reported as the launch's.
cudaError_t launch_batchstring(const char* device_bytes, const std::uint32_t* device_offsets,
                               std::uint32_t count, unsigned cost, char* device_out,
                               const LaunchShape& shape, cudaStream_t /*stream*/) noexcept {
  if (fake_cuda::sticky() != cudaSuccess) return cudaGetLastError();
  {
    std::lock_guard hold(fake_cuda::g_launch_lock);
    g_control.last_launch_device = fake_cuda::t_device;
    ++g_control.launches;
    g_control.last_launch_cost = cost;
    g_control.last_launch_threads_per_block = threads_per_block(count, shape);
    g_control.largest_launch = std::max(g_control.largest_launch.load(), count);
  }
  if (fake_cuda::launch_faults()) {
    // A kernel's fault is asynchronous: the launch itself succeeds, the stream's next call fails.
    const cudaError_t launched = cudaGetLastError();
    g_control.sticky_error = cudaErrorIllegalAddress;
    return launched;
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    char* out = device_out + std::size_t{i} * sha256::kDigestHexChars;
    sha256::batchstring_one<batchd::kernels::sha256::HostRoundConstants>(
        reinterpret_cast<const unsigned char*>(device_bytes) + device_offsets[i],
        device_offsets[i + 1] - device_offsets[i], cost, out);
    if (g_control.corrupt_answers) out[0] = out[0] == 'x' ? 'y' : 'x';
  }
  return cudaGetLastError();
}

}  // namespace batchd::kernels

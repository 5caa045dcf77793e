// The two version calls bench/gpu_check makes that tests/cuda/fake_cuda_runtime.cpp lacks, so
// that gpu_check links against that fake for a smoke run on a machine without a GPU
// (tests/check_gpu_check.sh). FAKE_CUDA_CORRUPT=1 in the environment makes the fake kernel write
// wrong answers, so the smoke run can see gpu_check fail on them (the backend's self-test
// refuses such a device).
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "tests/cuda/fake_cuda_runtime.hpp"

namespace {

// Before main(), so the setting holds for every backend gpu_check makes.
[[maybe_unused]] const bool g_corrupt = [] {
  const char* corrupt = std::getenv("FAKE_CUDA_CORRUPT");
  const bool on = corrupt != nullptr && std::strcmp(corrupt, "1") == 0;
  fake_cuda::control().corrupt_answers = on;
  return on;
}();

}  // namespace

cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

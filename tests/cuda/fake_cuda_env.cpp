// The fake CUDA runtime set from the environment, for a program linked against it and run as a
// process of its own (the daemon in check_exit_lost.sh), where no test code can reach the control:
//   FAKE_CUDA_DEVICES=K     the devices cudaGetDeviceCount reports, 1 to Control::kMaxDevices
//   FAKE_CUDA_FAULT_FILE=P  a kernel launched while file P exists faults (Control::fault_file)
// Tests in one process with the fake set the control directly and do not link this file.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "tests/cuda/fake_cuda_runtime.hpp"

namespace {

// A mistyped count must not quietly test one device instead of several.
int devices_from(const char* text) {
  int count = 0;
  const char* end = text + std::strlen(text);
  const auto [stop, error] = std::from_chars(text, end, count);
  if (error != std::errc{} || stop != end || count < 1 ||
      count > fake_cuda::Control::kMaxDevices) {
    std::fprintf(stderr, "fake cuda: FAKE_CUDA_DEVICES=%s is not 1 to %d\n", text,
                 fake_cuda::Control::kMaxDevices);
    std::_Exit(2);
  }
  return count;
}

// Before main(), so the settings hold for the first backend the program makes.
[[maybe_unused]] const bool g_from_environment = [] {
  fake_cuda::Control& control = fake_cuda::control();
  if (const char* devices = std::getenv("FAKE_CUDA_DEVICES")) {
    control.device_count = devices_from(devices);
  }
  control.fault_file = std::getenv("FAKE_CUDA_FAULT_FILE");  // the environment outlives the run
  return true;
}();

}  // namespace

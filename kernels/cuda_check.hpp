// CUDA errors as BackendStatus values: one macro that returns a failure carrying the runtime's
// own error text, so every CUDA call on the backend's paths is checked the same way.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "backend/backend.hpp"

namespace batchd::cuda {

// "what: <cudaGetErrorString> (<cudaGetErrorName>)".
inline std::string error_text(cudaError_t err, std::string_view what) {
  std::string text(what);
  text += ": ";
  text += cudaGetErrorString(err);
  text += " (";
  text += cudaGetErrorName(err);
  text += ")";
  return text;
}

// Errors after which the device's context is corrupt: every later call in this process fails
// with the same error, and only a new process can use the device again (CUDA runtime API,
// cudaError: "the process must be terminated and relaunched").
inline bool is_sticky(cudaError_t err) noexcept {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
      return true;
    default:
      return false;
  }
}

inline BackendStatus failure(cudaError_t err, std::string_view what) {
  return BackendStatus::failure(error_text(err, what));
}

}  // namespace batchd::cuda

// Evaluates a CUDA runtime call once; on error returns BackendStatus::failure from the enclosing
// function with `what` and the CUDA error string.
#define BATCHD_RETURN_IF_CUDA_ERR(call, what)                   \
  do {                                                          \
    const cudaError_t batchd_cuda_err_ = (call);                \
    if (batchd_cuda_err_ != cudaSuccess) {                      \
      return ::batchd::cuda::failure(batchd_cuda_err_, (what)); \
    }                                                           \
  } while (false)

// Propagates a failed BackendStatus from a helper.
#define BATCHD_RETURN_IF_FAILED(expr)                \
  do {                                               \
    ::batchd::BackendStatus batchd_status_ = (expr); \
    if (!batchd_status_.ok) return batchd_status_;   \
  } while (false)

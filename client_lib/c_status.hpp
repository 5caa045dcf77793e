// The C ABIs' status for the C++ API's error codes (c_api.cpp, worker_c_api.cpp).
#pragma once

#include "client_lib/batchd_client.h"
#include "client_lib/client.hpp"

namespace batchd::client_detail {

inline batchd_status to_status(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kTimeout: return BATCHD_TIMEOUT;
    case ErrorCode::kOverloaded: return BATCHD_OVERLOADED;
    case ErrorCode::kTooLarge: return BATCHD_TOO_LARGE;
    case ErrorCode::kInvalidUtf8: return BATCHD_INVALID_UTF8;
    case ErrorCode::kDaemonUnavailable: return BATCHD_DAEMON_UNAVAILABLE;
    case ErrorCode::kBackendError: return BATCHD_BACKEND_ERROR;
    case ErrorCode::kBackendUnavailable: return BATCHD_BACKEND_UNAVAILABLE;
    case ErrorCode::kCancelled: return BATCHD_CANCELLED;
    case ErrorCode::kProtocolError: return BATCHD_PROTOCOL_ERROR;
    case ErrorCode::kPermissionDenied: return BATCHD_PERMISSION_DENIED;
    case ErrorCode::kTooManyClients: return BATCHD_TOO_MANY_CLIENTS;
    case ErrorCode::kUnknownModel: return BATCHD_UNKNOWN_MODEL;
  }
  return BATCHD_PROTOCOL_ERROR;
}

}  // namespace batchd::client_detail

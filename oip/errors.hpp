// How the protocol answers each client-library error, over HTTP (/v2) and over gRPC, in one
// table so the two front-ends cannot drift apart (docs/OIP.md, "Errors").
#pragma once

#include "client_lib/client.hpp"

namespace batchd::oip {

// gRPC's status codes (the numbers are gRPC's wire contract, as grpc::StatusCode's).
enum class GrpcCode : int {
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kInternal = 13,
  kUnavailable = 14,
};

struct ErrorMapping {
  unsigned http_status;
  unsigned retry_after_s;  // HTTP's Retry-After; 0: none
  GrpcCode grpc_code;
};

constexpr ErrorMapping map_error(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kTimeout: return {504, 0, GrpcCode::kDeadlineExceeded};
    case ErrorCode::kOverloaded: return {503, 1, GrpcCode::kUnavailable};
    case ErrorCode::kTooLarge:
    case ErrorCode::kInvalidUtf8: return {400, 0, GrpcCode::kInvalidArgument};
    case ErrorCode::kBackendError:
    case ErrorCode::kProtocolError: return {500, 0, GrpcCode::kInternal};
    case ErrorCode::kDaemonUnavailable:
    case ErrorCode::kBackendUnavailable:
    case ErrorCode::kTooManyClients: return {503, 1, GrpcCode::kUnavailable};
    // The caller withdrew it; over HTTP the caller is usually gone, and a retry is what is left.
    case ErrorCode::kCancelled: return {503, 1, GrpcCode::kCancelled};
    // The front-end's own attachment was refused: the daemon is there but not for it.
    case ErrorCode::kPermissionDenied: return {503, 0, GrpcCode::kUnavailable};
    case ErrorCode::kUnknownModel: return {404, 0, GrpcCode::kNotFound};
  }
  return {500, 0, GrpcCode::kInternal};
}

}  // namespace batchd::oip

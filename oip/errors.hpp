// How the protocol answers each client-library error, over HTTP (/v2) and over gRPC, in one
// table so the two front-ends cannot drift apart (docs/OIP.md, "Errors").
#pragma once

#include <cstdint>

#include "client_lib/client.hpp"

namespace batchd::oip {

// gRPC's status codes (the numbers are gRPC's wire contract, as grpc::StatusCode's).
enum class GrpcCode : int {
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kInternal = 13,
  kUnavailable = 14,
};

// How a front-end says it sheds load (--overload-status). 503 and UNAVAILABLE by default: HAProxy
// 2.6's retry-on, which deploy/haproxy relies on to send a shed request to another node, can name
// 503 but not 429. 429 and RESOURCE_EXHAUSTED for balancers that count a 503 toward ejecting the
// backend (Envoy's outlier detection, Google Cloud's, HAProxy's observe layer7) and a 429 not.
enum class OverloadStatus : std::uint8_t { k503, k429 };

constexpr unsigned overload_http_status(OverloadStatus overload) noexcept {
  return overload == OverloadStatus::k429 ? 429 : 503;
}

constexpr GrpcCode overload_grpc_code(OverloadStatus overload) noexcept {
  return overload == OverloadStatus::k429 ? GrpcCode::kResourceExhausted : GrpcCode::kUnavailable;
}

struct ErrorMapping {
  unsigned http_status;
  unsigned retry_after_s;  // HTTP's Retry-After; 0: none
  GrpcCode grpc_code;
};

constexpr ErrorMapping map_error(ErrorCode code, OverloadStatus overload) noexcept {
  switch (code) {
    case ErrorCode::kTimeout: return {504, 0, GrpcCode::kDeadlineExceeded};
    case ErrorCode::kOverloaded: return {overload_http_status(overload), 1, overload_grpc_code(overload)};
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

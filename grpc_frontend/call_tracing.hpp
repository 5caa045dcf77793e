// batchd-grpc's server spans (docs/TRACING.md): a call's W3C traceparent metadata names its
// caller's span; a traced inference's span is the parent the daemon is handed, and ends with its
// status, named and described as OpenTelemetry's RPC conventions have it.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <string_view>

#include "tracing/door_tracer.hpp"

namespace batchd::grpcfront {

// None while tracing is off (tracer null), or when the call is not traced.
[[nodiscard]] tracing::ServerSpan begin_call_trace(tracing::DoorTracer* tracer, const grpc::CallbackServerContext& call,
                                                   std::string_view model);
// `method`: ModelInfer or ModelStreamInfer (one span per inference on a stream).
void end_call_trace(tracing::DoorTracer* tracer, const tracing::ServerSpan& span, std::string_view method,
                    std::string_view model, const grpc::Status& status);

}  // namespace batchd::grpcfront

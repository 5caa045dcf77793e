#include "grpc_frontend/call_tracing.hpp"

#include <array>
#include <optional>
#include <string>

#include "client_lib/traceparent.hpp"
#include "shm/clock.hpp"

namespace batchd::grpcfront {

tracing::ServerSpan begin_call_trace(tracing::DoorTracer* tracer, const grpc::CallbackServerContext& call,
                                     std::string_view model) {
  if (tracer == nullptr) return {};
  const auto& metadata = call.client_metadata();
  std::optional<TraceParent> caller;
  // Metadata given twice is not one traceparent: the call is as if it had none.
  if (metadata.count("traceparent") == 1) {
    const grpc::string_ref value = metadata.find("traceparent")->second;
    caller = parse_traceparent(std::string_view(value.data(), value.size()));
  }
  return tracer->begin(caller ? &caller->context : nullptr, caller && caller->sampled, model, shm::monotonic_ns());
}

void end_call_trace(tracing::DoorTracer* tracer, const tracing::ServerSpan& span, std::string_view method,
                    std::string_view model, const grpc::Status& status) {
  if (tracer == nullptr || !span.traced()) return;
  const std::string name = "inference.GRPCInferenceService/" + std::string(method);
  const std::array<tracing::Attribute, 5> attributes{{
      {"rpc.system", std::string_view("grpc")},
      {"rpc.service", std::string_view("inference.GRPCInferenceService")},
      {"rpc.method", method},
      {"rpc.grpc.status_code", static_cast<std::int64_t>(status.error_code())},
      {"triton.model_name", model},
  }};
  // OpenTelemetry's RPC server rule: these codes are the server's errors, the rest the caller's.
  const grpc::StatusCode code = status.error_code();
  const bool server_error = code == grpc::StatusCode::UNKNOWN || code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                            code == grpc::StatusCode::UNIMPLEMENTED || code == grpc::StatusCode::INTERNAL ||
                            code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DATA_LOSS;
  tracer->end(span, name, attributes, server_error ? std::string_view(status.error_message()) : std::string_view(),
              shm::monotonic_ns());
}

}  // namespace batchd::grpcfront

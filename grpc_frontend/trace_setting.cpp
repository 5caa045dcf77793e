// Triton's trace extension over gRPC (TraceSetting): the settings of the door's tracer, global or a
// model's, as HTTP's /v2/trace/setting serves them.
#include <stdexcept>
#include <string>
#include <vector>

#include "grpc_frontend/service.hpp"
#include "grpc_frontend/unary_finish.hpp"

namespace batchd::grpcfront {

namespace {

void fill_settings(const std::vector<tracing::TraceSetting>& settings, inference::TraceSettingResponse& response) {
  for (const tracing::TraceSetting& setting : settings) {
    auto& values = *(*response.mutable_settings())[setting.name].mutable_value();
    values.Assign(setting.value->begin(), setting.value->end());
  }
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::TraceSetting(grpc::CallbackServerContext* call,
                                                         const inference::TraceSettingRequest* request,
                                                         inference::TraceSettingResponse* response) {
  std::string model;
  if (!request->model_name().empty()) {
    oip::ModelCatalog::Lookup found = context_.models()->find(request->model_name(), {});
    if (!found.model) return finish(call, grpc::Status(grpc::StatusCode::NOT_FOUND, std::move(found.error)));
    model = found.model->name;
  }
  if (context_.tracer == nullptr) {
    if (!request->settings().empty()) {
      return finish(call, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                       "tracing is off in this batchd-grpc: start it with --trace-endpoint, or with "
                                       "OTEL_TRACES_EXPORTER=otlp (docs/TRACING.md)"));
    }
    fill_settings(tracing::trace_settings_off(), *response);
    return finish(call, grpc::Status::OK);
  }
  tracing::TraceSettings& settings = context_.tracer->settings();
  // No settings: a read (tritonclient's get_trace_settings sends none). To clear a model's own
  // settings over gRPC, name each with no value.
  if (request->settings().empty()) {
    fill_settings(settings.get(model), *response);
    return finish(call, grpc::Status::OK);
  }
  std::vector<tracing::TraceSetting> changes;
  for (const auto& [name, value] : request->settings()) {
    tracing::TraceSetting& change = changes.emplace_back();
    change.name = name;
    // A setting named with no value clears it, as tritonclient sends a None.
    if (value.value_size() != 0) change.value.emplace(value.value().begin(), value.value().end());
  }
  try {
    fill_settings(settings.update(model, changes), *response);
  } catch (const std::invalid_argument& refused) {
    return finish(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, refused.what()));
  }
  return finish(call, grpc::Status::OK);
}

}  // namespace batchd::grpcfront

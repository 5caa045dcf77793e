#include "grpc_frontend/service.hpp"

#include <algorithm>
#include <mutex>
#include <span>

#include "client_lib/fan_out.hpp"
#include "grpc_frontend/call_grant.hpp"
#include "grpc_frontend/call_tracing.hpp"
#include "grpc_frontend/unary_finish.hpp"
#include "oip/model.hpp"
#include "oip/served_models.hpp"
#include "shm/clock.hpp"

namespace batchd::grpcfront {

namespace {

// What GetServerMetadata lists: the protocol extensions this service implements.
constexpr std::string_view kExtensions[] = {"model_configuration", "statistics", "trace"};

// The model a call names, or NOT_FOUND saying why there is none.
grpc::Status find_model(ServiceContext& context, const std::string& name, const std::string& version,
                        oip::ModelCatalog::Model& model) {
  oip::ModelCatalog::Lookup found = context.models()->find(name, version);
  if (!found.model) return grpc::Status(grpc::StatusCode::NOT_FOUND, std::move(found.error));
  model = std::move(found.model);
  return grpc::Status::OK;
}

void fill_tensor(inference::ModelMetadataResponse::TensorMetadata& tensor, std::string_view name) {
  tensor.set_name(std::string(name));
  tensor.set_datatype(std::string(oip::kBytesType));
  tensor.add_shape(-1);
  tensor.add_shape(1);
}

void set_duration(inference::StatisticDuration& duration, std::uint64_t count, std::uint64_t ns) {
  duration.set_count(count);
  duration.set_ns(ns);
}


// One ModelInfer call. Deleted when both gRPC is done with it (OnDone) and its constructor has
// returned: the daemon's answer may finish the call on another thread while it still runs.
class UnaryInfer final : public grpc::ServerUnaryReactor {
 public:
  UnaryInfer(grpc::CallbackServerContext* call, const inference::ModelInferRequest* request,
             inference::ModelInferResponse* response, ServiceContext& context)
      : response_(response), context_(context), started_ns_(shm::monotonic_ns()) {
    start(*call, *request);
    release();
  }

  void OnCancel() override {
    std::shared_ptr<FanOut> fan;
    {
      std::lock_guard lock(mu_);
      fan = fan_;
    }
    if (fan) fan->cancel();  // the answer comes as cancelled, and finishes the call
  }
  void OnDone() override {
    release_call(context_);
    release();
  }

 private:
  void start(const grpc::CallbackServerContext& call, const inference::ModelInferRequest& request) {
    PreparedInfer prepared;
    if (grpc::Status refused = prepare_infer(call, request, context_, prepared); !refused.ok()) {
      Finish(refused);
      return;
    }
    reply_ = std::move(prepared.parsed.reply);
    strings_ = prepared.parsed.inputs.size();
    span_ = prepared.span;
    std::shared_ptr<FanOut> fan =
        FanOut::start(*prepared.client, prepared.parsed.inputs, prepared.timeout,
                      RequestOptions{prepared.priority, reply_.model->name, prepared.cache_scope, span_.for_daemon()},
                      [this](FanOut::Outcome&& outcome) { on_answer(std::move(outcome)); });
    std::lock_guard lock(mu_);
    fan_ = std::move(fan);
  }

  void on_answer(FanOut::Outcome&& outcome) {
    grpc::Status status = grpc::Status::OK;
    if (outcome.error) {
      status = status_for_error(*outcome.error, context_.overload);
    } else {
      fill_infer_response(reply_, outcome.results, *response_);
    }
    context_.counters.record(reply_.model->id, status.ok(), shm::monotonic_ns() - started_ns_, strings_);
    end_call_trace(context_.tracer, span_, "ModelInfer", reply_.model->name, status);
    Finish(status);
  }

  void release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  inference::ModelInferResponse* response_;
  ServiceContext& context_;
  std::int64_t started_ns_;
  InferReply reply_;
  tracing::ServerSpan span_;
  std::size_t strings_ = 0;
  std::atomic<int> refs_{2};  // gRPC's (until OnDone) and the constructor's
  std::mutex mu_;
  std::shared_ptr<FanOut> fan_;  // guarded by mu_
};

}  // namespace

std::shared_ptr<const oip::ModelCatalog> ServiceContext::models() {
  std::lock_guard lock(catalog_mu);
  const std::int64_t now_ns = shm::monotonic_ns();
  if (catalog_read_ns == 0 || now_ns - catalog_read_ns >= oip::kCatalogReadNs) {
    if (Client* client = pool != nullptr ? pool->pick() : nullptr) {
      catalog_read_ns = now_ns;
      if (auto served = oip::served_catalog(client->daemon_status())) catalog = std::move(served);
    }
  }
  if (catalog != nullptr) return catalog;
  // The default catalog lives forever: an aliasing pointer that owns nothing.
  return std::shared_ptr<const oip::ModelCatalog>(std::shared_ptr<const void>(), &oip::default_catalog());
}

std::optional<DaemonStatus> ServiceContext::daemon_status() {
  Client* client = pool != nullptr ? pool->pick() : nullptr;
  if (client == nullptr) return std::nullopt;
  return client->daemon_status();
}

grpc::Status prepare_infer(const grpc::CallbackServerContext& call, const inference::ModelInferRequest& request,
                           ServiceContext& context, PreparedInfer& out) {
  out.client = context.pool->pick();
  const std::shared_ptr<const oip::ModelCatalog> models = context.models();
  grpc::Status status = parse_infer_request(request, *models, context.limits,
                                            out.client != nullptr ? out.client->max_input_bytes() : 0, out.parsed);
  if (!status.ok()) return status;
  if (out.client == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not attached to the batchd daemon");
  // A call without a deadline has the largest time point as its deadline.
  const auto deadline = call.deadline();
  const bool has_deadline = deadline != std::chrono::system_clock::time_point::max();
  const auto left = has_deadline ? std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::system_clock::now())
                                 : context.limits.max_timeout;
  if (out.parsed.timeout) {
    out.timeout = std::min(*out.parsed.timeout, left);
  } else {
    out.timeout = has_deadline ? std::min(left, context.limits.max_timeout) : context.limits.default_timeout;
  }
  out.timeout = std::max(std::chrono::milliseconds(1), out.timeout);
  const grants::Resolved granted = granted_class(context.grants, call, context.grant_counters);
  const grants::Capped capped = grants::cap(out.parsed.priority, granted.max);
  if (capped.downgraded) context.grant_counters.downgraded(out.parsed.priority, capped.priority);
  out.priority = capped.priority;
  out.cache_scope = granted.cache_scope;
  out.span = begin_call_trace(context.tracer, call, out.parsed.reply.model->name);
  return grpc::Status::OK;
}

grpc::Status too_many_calls(const ServiceContext& context) {
  return grpc::Status(static_cast<grpc::StatusCode>(oip::overload_grpc_code(context.overload)),
                      "this server has its maximum of " + std::to_string(context.max_calls) +
                          " inference calls and streams open (--max-calls); retry later");
}

bool take_call(ServiceContext& context) {
  if (context.calls.fetch_add(1, std::memory_order_relaxed) < context.max_calls) return true;
  context.calls.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void release_call(ServiceContext& context) { context.calls.fetch_sub(1, std::memory_order_relaxed); }

std::optional<NotReady> InferenceService::not_ready() {
  if (context_.draining.load(std::memory_order_acquire)) return NotReady{"draining", "the server is shutting down"};
  return context_.pool->not_ready(context_.ready_max_queue);
}

grpc::ServerUnaryReactor* InferenceService::ServerLive(grpc::CallbackServerContext* call,
                                                       const inference::ServerLiveRequest*,
                                                       inference::ServerLiveResponse* response) {
  response->set_live(true);
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerReady(grpc::CallbackServerContext* call,
                                                        const inference::ServerReadyRequest*,
                                                        inference::ServerReadyResponse* response) {
  response->set_ready(!not_ready());
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelReady(grpc::CallbackServerContext* call,
                                                       const inference::ModelReadyRequest* request,
                                                       inference::ModelReadyResponse* response) {
  // As Triton answers: a model or version it does not serve is not ready, not an error, so client
  // code that asks before it sends (tritonclient's is_model_ready) works unchanged.
  const oip::ModelCatalog::Model model = context_.models()->find(request->name(), request->version()).model;
  response->set_ready(model != nullptr && model->unavailable.empty() && !not_ready());
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ServerMetadata(grpc::CallbackServerContext* call,
                                                           const inference::ServerMetadataRequest*,
                                                           inference::ServerMetadataResponse* response) {
  response->set_name(std::string(oip::kServerName));
  response->set_version(std::string(oip::server_version()));
  for (const std::string_view extension : kExtensions) response->add_extensions(std::string(extension));
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelMetadata(grpc::CallbackServerContext* call,
                                                          const inference::ModelMetadataRequest* request,
                                                          inference::ModelMetadataResponse* response) {
  oip::ModelCatalog::Model model;
  grpc::Status status = find_model(context_, request->name(), request->version(), model);
  if (!status.ok()) return finish(call, status);
  response->set_name(model->name);
  response->add_versions(model->version);
  response->set_platform("batchd");
  fill_tensor(*response->add_inputs(), model->input);
  fill_tensor(*response->add_outputs(), model->output);
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::ModelConfig(grpc::CallbackServerContext* call,
                                                        const inference::ModelConfigRequest* request,
                                                        inference::ModelConfigResponse* response) {
  oip::ModelCatalog::Model model;
  grpc::Status status = find_model(context_, request->name(), request->version(), model);
  if (!status.ok()) return finish(call, status);
  inference::ModelConfig& config = *response->mutable_config();
  config.set_name(model->name);
  config.set_platform("batchd");
  config.set_backend("batchd");
  config.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  config.set_max_batch_size(static_cast<std::int32_t>(context_.limits.max_elements));
  inference::ModelInput& input = *config.add_input();
  input.set_name(model->input);
  input.set_data_type(inference::TYPE_STRING);
  input.add_dims(1);
  inference::ModelOutput& output = *config.add_output();
  output.set_name(model->output);
  output.set_data_type(inference::TYPE_STRING);
  output.add_dims(1);
  inference::ModelInstanceGroup& group = *config.add_instance_group();
  group.set_name(model->name);
  group.set_kind(inference::ModelInstanceGroup::KIND_GPU);
  group.set_count(1);
  config.mutable_dynamic_batching();
  config.mutable_model_transaction_policy()->set_decoupled(false);
  config.mutable_response_cache()->set_enable(model->response_cache);
  return finish(call, grpc::Status::OK);
}

// As /v2/models/stats: the counts are this front-end's inferences of each model; every inference
// was queued, and perf_analyzer finds the model's version by its queue count rising. Queue and
// compute times are the daemon's mean per request of the model (its models table) times the count.
grpc::ServerUnaryReactor* InferenceService::ModelStatistics(grpc::CallbackServerContext* call,
                                                            const inference::ModelStatisticsRequest* request,
                                                            inference::ModelStatisticsResponse* response) {
  const std::shared_ptr<const oip::ModelCatalog> catalog = context_.models();
  std::span<const oip::ModelCatalog::Model> models = catalog->models();
  oip::ModelCatalog::Model named;
  if (!request->name().empty()) {
    grpc::Status status = find_model(context_, request->name(), request->version(), named);
    if (!status.ok()) return finish(call, status);
    models = {&named, 1};
  }
  const std::optional<DaemonStatus> daemon = context_.daemon_status();
  const std::vector<oip::ModelTimes> all_times = daemon ? oip::model_times(*daemon) : std::vector<oip::ModelTimes>{};
  for (const oip::ModelCatalog::Model& model : models) {
    const oip::InferStatistics s = context_.counters.snapshot(model->id);
    const oip::ModelTimes times = oip::times_of(all_times, model->id);
    const std::uint64_t queued = s.success_count + s.fail_count;
    inference::ModelStatistics& stats = *response->add_model_stats();
    stats.set_name(model->name);
    stats.set_version(model->version);
    stats.set_last_inference(static_cast<std::uint64_t>(s.last_inference_ms));
    stats.set_inference_count(s.inference_count);
    stats.set_execution_count(s.success_count);
    inference::InferStatistics& infer = *stats.mutable_inference_stats();
    set_duration(*infer.mutable_success(), s.success_count, s.success_ns);
    set_duration(*infer.mutable_fail(), s.fail_count, s.fail_ns);
    set_duration(*infer.mutable_queue(), queued, oip::at_daemon_mean(queued, times.queue_ns, times));
    // perf_analyzer wants the three compute counts equal: input and output take no time here.
    set_duration(*infer.mutable_compute_input(), s.success_count, 0);
    set_duration(*infer.mutable_compute_infer(), s.success_count,
                 oip::at_daemon_mean(s.success_count, times.compute_ns, times));
    set_duration(*infer.mutable_compute_output(), s.success_count, 0);
    // Every client's, as the daemon counts them (docs/CACHE.md): a hit never reaches the front-end's own counts.
    set_duration(*infer.mutable_cache_hit(), times.cache_hits, times.cache_hit_ns);
    set_duration(*infer.mutable_cache_miss(), times.cache_misses, times.cache_miss_ns);
  }
  return finish(call, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryIndex(grpc::CallbackServerContext* call,
                                                            const inference::RepositoryIndexRequest*,
                                                            inference::RepositoryIndexResponse* response) {
  const std::optional<NotReady> why = not_ready();
  const std::shared_ptr<const oip::ModelCatalog> catalog = context_.models();
  for (const oip::ModelCatalog::Model& served : catalog->models()) {
    auto& model = *response->add_models();
    model.set_name(served->name);
    model.set_version(served->version);
    const std::string& reason = why ? why->message : served->unavailable;
    model.set_state(reason.empty() ? "READY" : "UNAVAILABLE");
    model.set_reason(reason);
  }
  return finish(call, grpc::Status::OK);
}

namespace {

// Model control on the context's queue; the RPC is finished from the queue's thread.
// Triton's parameters: a configuration or files to load with, which batchd does not take (it loads
// a model as its daemon's config declares it); "unload_dependents", which tritonclient sends and
// which means nothing here (no model depends on another). Returns the first one not taken.
template <class Parameters>
std::optional<std::string> parameter_not_taken(const Parameters& parameters) {
  for (const auto& [key, value] : parameters) {
    if (key != "unload_dependents") return key;
  }
  return std::nullopt;
}

grpc::ServerUnaryReactor* control_model(grpc::CallbackServerContext* call, ServiceContext& context,
                                        const std::string& model, std::optional<std::string> not_taken,
                                        ModelAction action) {
  if (context.model_control == nullptr) {
    return finish(call, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                     "model control is off: batchd-grpc serves load and unload with --model-control"));
  }
  if (not_taken) {
    return finish(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     "batchd loads a model as its daemon's config declares it: parameter \"" +
                                         *not_taken + "\" is not taken"));
  }
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  const bool queued = context.model_control->submit(
      model, action, [reactor, overload = context.overload](std::optional<std::string> account, const Error& error) {
        reactor->Finish(account ? grpc::Status::OK : status_for_error(error, overload));
      });
  if (!queued) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many load and unload requests wait already; retry"));
  }
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* InferenceService::RepositoryModelLoad(grpc::CallbackServerContext* call,
                                                                const inference::RepositoryModelLoadRequest* request,
                                                                inference::RepositoryModelLoadResponse*) {
  return control_model(call, context_, request->model_name(), parameter_not_taken(request->parameters()),
                       ModelAction::kLoad);
}

grpc::ServerUnaryReactor* InferenceService::RepositoryModelUnload(
    grpc::CallbackServerContext* call, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse*) {
  return control_model(call, context_, request->model_name(), parameter_not_taken(request->parameters()),
                       ModelAction::kUnload);
}

grpc::ServerUnaryReactor* InferenceService::ModelInfer(grpc::CallbackServerContext* call,
                                                       const inference::ModelInferRequest* request,
                                                       inference::ModelInferResponse* response) {
  if (!take_call(context_)) return finish(call, too_many_calls(context_));
  return new UnaryInfer(call, request, response, context_);
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceService::ModelStreamInfer(grpc::CallbackServerContext* call) {
  return start_stream_infer(call, context_);
}

}  // namespace batchd::grpcfront

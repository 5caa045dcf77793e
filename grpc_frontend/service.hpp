// inference.GRPCInferenceService on gRPC's callback API: the metadata and health calls answer at
// once; an inference is checked, its strings go to the daemon as one submission, and the RPC is
// finished from the daemon client's polling thread when the answers are in. No thread waits on an
// RPC or on the daemon.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "frontend/grant_counters.hpp"
#include "frontend/priority_grants.hpp"
#include "client_lib/model_control_queue.hpp"
#include "grpc_frontend/daemon_pool.hpp"
#include "grpc_frontend/infer_request.hpp"
#include "grpc_frontend/options.hpp"
#include "grpc_frontend/stream_watchdog.hpp"
#include "tracing/door_tracer.hpp"
#include "oip/grpc_service.grpc.pb.h"
#include "oip/infer_counters.hpp"
#include "oip/model.hpp"

namespace batchd::grpcfront {

// What every RPC handler and reactor shares; outlives the server.
struct ServiceContext {
  InferLimits limits;
  std::uint32_t max_stream_in_flight = 256;
  std::size_t max_stream_queued_bytes = 16U << 20;  // a stream's answers waiting to be written
  std::uint32_t max_calls = 4096;                   // inference calls and streams open at once
  oip::OverloadStatus overload = oip::OverloadStatus::k503;  // how a call shed for want of room ends
  tracing::DoorTracer* tracer = nullptr;  // tracing on: the server spans' tracer; else none
  std::uint64_t ready_max_queue = 65536;
  DaemonPool* pool = nullptr;
  StreamWatchdog* watchdog = nullptr;
  ModelControlQueue* model_control = nullptr;  // --model-control: loads and unloads; else none
  oip::ModelInferCounters counters;  // by model id
  // The models requests may name: those the daemon publishes, read again at most once a second
  // (the default model alone until a daemon is attached). Any thread; the catalog returned stays
  // whole while held, whatever a later read makes of it.
  std::shared_ptr<const oip::ModelCatalog> models();
  // The daemon's status page now, through any attached client; none while none is attached.
  std::optional<DaemonStatus> daemon_status();
  std::mutex catalog_mu;
  std::shared_ptr<const oip::ModelCatalog> catalog;  // guarded by catalog_mu; null: the default
  std::int64_t catalog_read_ns = 0;                  // guarded by catalog_mu
  grants::GrantPolicy grants;                   // who may use which priority class (default: normal)
  grants::GrantCounters grant_counters;         // claims above a caller's grant (--metrics-listen)
  std::atomic<std::uint32_t> calls{0};  // inference calls and streams open now
  std::atomic<bool> draining{false};    // SIGTERM: ServerReady fails while RPCs finish
};

// What an inference needs before its strings go to the daemon.
struct PreparedInfer {
  Client* client = nullptr;
  ParsedInfer parsed;
  std::chrono::milliseconds timeout{};  // what the daemon is given: see prepare_infer
  Priority priority = Priority::kNormal;  // the claim, capped at the caller's grant
  std::uint32_t cache_scope = 0;          // the caller's (grants::Resolved::cache_scope)
  tracing::ServerSpan span;               // traced: its server span (call_tracing.hpp)
};

// Checks `request` (parse_infer_request) and picks a daemon client. The timeout is the request's
// `timeout` parameter cut to what is left of the call's deadline; without the parameter, what is
// left of the deadline (capped at max_timeout); with neither, the default. A refusal is not an
// inference: the statistics count only inferences that reached the daemon, as Triton's count
// those that reached the model. The class is the request's claim capped at what the operator
// granted the caller (call_grant.hpp); a downgrade is counted.
grpc::Status prepare_infer(const grpc::CallbackServerContext& call, const inference::ModelInferRequest& request,
                           ServiceContext& context, PreparedInfer& out);

// Takes one of max_calls for a new inference call or stream: false (answer too_many_calls) when
// none is left. release_call() gives it back when the call is done.
bool take_call(ServiceContext& context);
void release_call(ServiceContext& context);
grpc::Status too_many_calls(const ServiceContext& context);

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit InferenceService(ServiceContext& context) : context_(context) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* call, const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* call, const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* call, const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* call,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* call,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* call, const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* call,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* call,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* call,
                                                const inference::RepositoryModelLoadRequest* request,
                                                inference::RepositoryModelLoadResponse* response) override;
  grpc::ServerUnaryReactor* RepositoryModelUnload(grpc::CallbackServerContext* call,
                                                  const inference::RepositoryModelUnloadRequest* request,
                                                  inference::RepositoryModelUnloadResponse* response) override;
  grpc::ServerUnaryReactor* TraceSetting(grpc::CallbackServerContext* call,
                                         const inference::TraceSettingRequest* request,
                                         inference::TraceSettingResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* call, const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* call) override;

 private:
  // Nothing when the server can take inferences; else why not.
  std::optional<NotReady> not_ready();

  ServiceContext& context_;
};

// A new stream's reactor (stream_infer.cpp).
grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* start_stream_infer(
    grpc::CallbackServerContext* call, ServiceContext& context);

}  // namespace batchd::grpcfront

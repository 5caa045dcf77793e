// inference.GRPCInferenceService on gRPC's callback API: the metadata and health calls answer at
// once; an inference is checked, its strings go to the daemon as one submission, and the RPC is
// finished from the daemon client's polling thread when the answers are in. No thread waits on an
// RPC or on the daemon.
#pragma once

#include <atomic>

#include "grpc_frontend/daemon_pool.hpp"
#include "grpc_frontend/infer_request.hpp"
#include "grpc_frontend/options.hpp"
#include "oip/grpc_service.grpc.pb.h"
#include "oip/infer_counters.hpp"

namespace batchd::grpcfront {

// What every RPC handler and reactor shares; outlives the server.
struct ServiceContext {
  InferLimits limits;
  std::uint32_t max_stream_in_flight = 256;
  std::uint64_t ready_max_queue = 65536;
  DaemonPool* pool = nullptr;
  oip::InferCounters counters;
  std::atomic<bool> draining{false};  // SIGTERM: ServerReady fails while RPCs finish
};

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
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* call, const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* ModelStreamInfer(
      grpc::CallbackServerContext* call) override;

 private:
  // Nothing when the server can take inferences; else why not.
  std::optional<NotReady> not_ready();

  ServiceContext& context_;
};

// The time an inference may take: its timeout, cut to what is left of the call's deadline.
std::chrono::milliseconds infer_timeout(const grpc::CallbackServerContext& call, std::chrono::milliseconds timeout);

// A new stream's reactor (stream_infer.cpp).
grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>* start_stream_infer(
    grpc::CallbackServerContext* call, ServiceContext& context);

}  // namespace batchd::grpcfront

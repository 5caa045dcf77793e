#include "tools/stress_grpc_transport.hpp"

#include <grpc/support/time.h>
#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "oip/bytes_tensor.hpp"
#include "oip/grpc_service.grpc.pb.h"
#include "oip/grpc_service.pb.h"
#include "oip/model.hpp"
#include "tools/stress_clock.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

namespace {

using Channel = std::shared_ptr<grpc::Channel>;
using Stub = inference::GRPCInferenceService::Stub;
using std::chrono::system_clock;

// Time for the server's own DEADLINE_EXCEEDED to reach us: it is told our timeout, and the call's
// deadline is this much later, so a timeout it reports is counted as the server's, not lost to a
// race (as over HTTP).
constexpr std::chrono::milliseconds kGrpcServerGrace{1000};
// A pump with nothing due to send still returns this often, so the loop sees a run's end.
constexpr std::int64_t kMaxPumpWaitNs = 100'000'000;
// Completions one pump takes before it returns.
constexpr int kMaxCompletionsPerPump = 256;

Channel open_channel(const std::string& target) {
  grpc::ChannelArguments args;
  // Channels with the same arguments to the same target would share one connection in gRPC's
  // global subchannel pool; a pool of its own gives each channel a connection of its own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);  // the sim backend's answers can be far larger than inputs
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// One ModelInferRequest kept for reuse: all but the input's bytes is set once. Not thread-safe.
class RequestBuilder {
 public:
  explicit RequestBuilder(std::chrono::milliseconds server_timeout) {
    const oip::ModelDescription& model = oip::default_model();
    request_.set_model_name(model.name);
    auto* input = request_.add_inputs();
    input->set_name(model.input);
    input->set_datatype(std::string(oip::kBytesType));
    input->add_shape(1);
    input->add_shape(1);
    // Triton's request timeout, in microseconds, as batchd-grpc reads it.
    (*request_.mutable_parameters())["timeout"].set_int64_param(server_timeout.count() * 1000);
    raw_ = request_.add_raw_input_contents();
  }
  RequestBuilder(const RequestBuilder&) = delete;
  RequestBuilder& operator=(const RequestBuilder&) = delete;

  // The request for `input`, valid until the next call. gRPC serializes it when the call is
  // made, so it may be rebuilt at once.
  const inference::ModelInferRequest& with(std::string_view input) {
    raw_->clear();
    oip::append_bytes_element(*raw_, input);
    return request_;
  }

 private:
  inference::ModelInferRequest request_;
  std::string* raw_;  // request_'s one raw_input_contents
};

std::size_t error_kind_of(grpc::StatusCode code, grpc::Channel& channel) {
  switch (code) {
    case grpc::StatusCode::DEADLINE_EXCEEDED: return error_kind(ErrorCode::kTimeout);
    // The server's answer when it cannot take the request (as HTTP's 503); gRPC's own when the
    // connection is gone, which the channel's state tells apart.
    case grpc::StatusCode::UNAVAILABLE:
      return channel.GetState(false) == GRPC_CHANNEL_READY ? error_kind(ErrorCode::kOverloaded)
                                                           : error_kind(ErrorCode::kDaemonUnavailable);
    case grpc::StatusCode::INVALID_ARGUMENT: return kBadRequestKind;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return error_kind(ErrorCode::kTooLarge);
    case grpc::StatusCode::INTERNAL: return error_kind(ErrorCode::kBackendError);
    case grpc::StatusCode::CANCELLED: return error_kind(ErrorCode::kCancelled);
    // NOT_FOUND (no such model), UNIMPLEMENTED (no such service), ...: the two sides disagree.
    default: return error_kind(ErrorCode::kProtocolError);
  }
}

// What a finished call came to; an output is a view into `response` (and `scratch`).
Outcome outcome_of(const grpc::Status& status, const inference::ModelInferResponse& response,
                   grpc::Channel& channel, std::vector<std::string_view>& scratch) {
  if (!status.ok()) return Outcome{false, {}, error_kind_of(status.error_code(), channel)};
  scratch.clear();
  if (response.raw_output_contents_size() == 1) {
    if (!oip::decode_bytes_elements(response.raw_output_contents(0), 1, scratch)) {
      return Outcome{true, scratch.front(), 0};
    }
  } else if (response.raw_output_contents_size() == 0 && response.outputs_size() == 1 &&
             response.outputs(0).contents().bytes_contents_size() == 1) {
    // The protocol's other way to carry strings; batchd-grpc answers raw, as Triton does.
    return Outcome{true, response.outputs(0).contents().bytes_contents(0), 0};
  }
  return Outcome{false, {}, error_kind(ErrorCode::kProtocolError)};
}

// How long a call may take, from when it is made.
std::chrono::nanoseconds grpc_call_deadline(const Options& options) { return options.timeout + kGrpcServerGrace; }

class GrpcCaller final : public Caller {
 public:
  GrpcCaller(Channel channel, const Options& options)
      : channel_(std::move(channel)), stub_(inference::GRPCInferenceService::NewStub(channel_)),
        builder_(options.timeout), deadline_(grpc_call_deadline(options)) {}

  // batchd-grpc takes no priority classes (the options refuse any but normal).
  Outcome call(std::string_view input, const RequestOptions&) override {
    grpc::ClientContext context;  // one per call: gRPC does not reuse them
    context.set_deadline(system_clock::now() + deadline_);
    response_.Clear();
    const grpc::Status status = stub_->ModelInfer(&context, builder_.with(input), &response_);
    return outcome_of(status, response_, *channel_, scratch_);  // response_ lives until the next call
  }

 private:
  Channel channel_;
  std::unique_ptr<Stub> stub_;
  RequestBuilder builder_;
  std::chrono::nanoseconds deadline_;
  inference::ModelInferResponse response_;
  std::vector<std::string_view> scratch_;
};

// One call in flight on a lane: the tag its completion comes back with.
struct AsyncCall {
  std::uint64_t id = 0;
  grpc::Channel* channel = nullptr;
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  grpc::Status status;
  // Declared last, so it goes first: the context must outlive it.
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> reader;
};

// The open loop's lane: submit() makes calls on its channels in turn (the pacing thread), pump()
// takes what finished from the completion queue (the pumping thread). The two share only the
// queue, which is thread-safe, and an atomic count.
class GrpcLane final : public OpenLane {
 public:
  GrpcLane(std::vector<Channel> channels, const Options& options, const InputPool& inputs)
      : channels_(std::move(channels)), inputs_(inputs), builder_(options.timeout),
        deadline_(grpc_call_deadline(options)) {
    for (const Channel& channel : channels_) stubs_.push_back(inference::GRPCInferenceService::NewStub(channel));
    input_.reserve(inputs.max_bytes());
  }
  ~GrpcLane() override {
    // The loop waits until all its calls finished; any left (a run cut short) finish by their
    // deadline, and the queue must hand back every tag before it goes.
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) delete static_cast<AsyncCall*>(tag);
  }
  GrpcLane(const GrpcLane&) = delete;
  GrpcLane& operator=(const GrpcLane&) = delete;

  std::optional<std::size_t> submit(const DueRequest& request) override;
  void pump(std::int64_t wake_ns, Completions& done) override;

 private:
  void finish(AsyncCall* call, Completions& done);

  std::vector<Channel> channels_;
  std::vector<std::unique_ptr<Stub>> stubs_;  // one per channel
  grpc::CompletionQueue cq_;
  const InputPool& inputs_;
  std::atomic<std::uint64_t> in_flight_{0};
  // The submitting thread's:
  RequestBuilder builder_;
  std::chrono::nanoseconds deadline_;
  std::string input_;
  std::size_t turn_ = 0;
  // The pumping thread's:
  std::vector<std::string_view> scratch_;
};

std::optional<std::size_t> GrpcLane::submit(const DueRequest& request) {
  auto call = std::make_unique<AsyncCall>();
  const std::size_t k = turn_++ % stubs_.size();
  call->id = request.id;
  call->channel = channels_[k].get();
  call->context.set_deadline(system_clock::now() + deadline_);
  inputs_.build(request.id, input_);
  call->reader = stubs_[k]->PrepareAsyncModelInfer(&call->context, builder_.with(input_), &cq_);
  call->reader->StartCall();
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  // From Finish on the call is the queue's, until pump() takes its tag back.
  AsyncCall* tag = call.release();
  tag->reader->Finish(&tag->response, &tag->status, tag);
  return std::nullopt;
}

void GrpcLane::pump(std::int64_t wake_ns, Completions& done) {
  if (wake_ns == kNever && in_flight_.load(std::memory_order_relaxed) == 0) return;
  const std::int64_t wait_ns = std::clamp<std::int64_t>(wake_ns - now_ns(), 0, kMaxPumpWaitNs);
  void* tag = nullptr;
  bool ok = false;
  // The first completion is waited for; those already there behind it are taken without waiting.
  grpc::CompletionQueue::NextStatus next =
      cq_.AsyncNext(&tag, &ok, system_clock::now() + std::chrono::nanoseconds(wait_ns));
  for (int taken = 0; next == grpc::CompletionQueue::GOT_EVENT;) {
    finish(static_cast<AsyncCall*>(tag), done);
    if (++taken == kMaxCompletionsPerPump) break;
    next = cq_.AsyncNext(&tag, &ok, gpr_inf_past(GPR_CLOCK_MONOTONIC));
  }
}

void GrpcLane::finish(AsyncCall* call, Completions& done) {
  const std::unique_ptr<AsyncCall> owned(call);
  const std::int64_t done_ns = now_ns();  // before the answer is checked, which is not the server's time
  done.finished(call->id, done_ns, outcome_of(call->status, call->response, *call->channel, scratch_));
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
}

class GrpcTransport final : public Transport {
 public:
  GrpcTransport(const Options& options, const InputPool& inputs, std::vector<Channel> channels)
      : options_(options), inputs_(inputs), channels_(std::move(channels)) {}

  // Channels are thread-safe: threads beyond the channels share them.
  std::unique_ptr<Caller> make_caller(unsigned thread) override {
    return std::make_unique<GrpcCaller>(channels_[thread % channels_.size()], options_);
  }
  [[nodiscard]] unsigned lane_count() const noexcept override { return options_.io_threads; }
  // Submitting and pumping meet only in the completion queue, which is thread-safe; and
  // AsyncNext wakes at millisecond granularity, too coarse to pace the sends.
  [[nodiscard]] bool submit_while_pumping() const noexcept override { return true; }
  // Channels lane, lane + lanes, ...: the options give every lane one at least.
  std::unique_ptr<OpenLane> make_lane(unsigned lane) override {
    std::vector<Channel> share;
    for (std::size_t i = lane; i < channels_.size(); i += lane_count()) share.push_back(channels_[i]);
    return std::make_unique<GrpcLane>(std::move(share), options_, inputs_);
  }

 private:
  const Options& options_;
  const InputPool& inputs_;
  std::vector<Channel> channels_;
};

}  // namespace

Expected<std::unique_ptr<Transport>> make_grpc_transport(const Options& options, const InputPool& inputs) {
  std::vector<Channel> channels;
  for (unsigned i = 0; i < options.connections; ++i) {
    Channel channel = open_channel(options.grpc_target);
    if (!channel->WaitForConnected(system_clock::now() + options.connect_timeout)) {
      return make_failure(std::errc::timed_out,
                          "cannot connect to " + options.grpc_target + ": no gRPC connection within " +
                              std::to_string(options.connect_timeout.count()) + " ms");
    }
    channels.push_back(std::move(channel));
  }
  return std::unique_ptr<Transport>(std::make_unique<GrpcTransport>(options, inputs, std::move(channels)));
}

}  // namespace batchd::stress

// ModelStreamInfer: many inferences in flight on one bidirectional stream. Each request read is
// checked and submitted at once and the next read starts; answers are written in the order they
// complete (clients match them by id), one write at a time. A stream holds at most
// max_stream_in_flight requests unanswered or unwritten: past that it is not read until answers
// drain, so a client that sends without reading costs only its own stream. A request that fails
// gets an error_message response and the stream goes on, as Triton does.
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "client_lib/fan_out.hpp"
#include "grpc_frontend/service.hpp"
#include "oip/model.hpp"
#include "shm/clock.hpp"

namespace batchd::grpcfront {

namespace {

using Response = inference::ModelStreamInferResponse;


// Deleted when gRPC is done with it (OnDone) and no inference of it is still at the daemon: a
// late answer must find it alive.
class StreamInfer final : public grpc::ServerBidiReactor<inference::ModelInferRequest, Response> {
 public:
  StreamInfer(grpc::CallbackServerContext* call, ServiceContext& context) : call_(*call), context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard lock(mu_);
      if (!ok || broken_ || finished_) {  // the client closed its side, or the stream is over
        reads_done_ = true;
        maybe_finish_locked();
        return;
      }
    }
    submit(request_);
    std::lock_guard lock(mu_);
    read_paused_ = true;
    resume_read_locked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    writes_.pop_front();
    if (!ok) {
      broken_ = true;  // the client is gone: nothing more can be written
      writes_.clear();
    } else if (!writes_.empty()) {
      start_write_locked();
    }
    resume_read_locked();
    maybe_finish_locked();
  }

  void OnCancel() override { cancel_all(); }

  void OnDone() override {
    std::unique_lock lock(mu_);
    done_ = true;
    unlock_and_maybe_delete(lock);
  }

 private:
  void submit(const inference::ModelInferRequest& request) {
    const std::int64_t started_ns = shm::monotonic_ns();
    Client* client = context_.pool->pick();
    ParsedInfer parsed;
    grpc::Status status =
        parse_infer_request(request, context_.limits, client != nullptr ? client->max_input_bytes() : 0, parsed);
    if (status.ok() && client == nullptr) {
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "not attached to the batchd daemon");
    }
    if (!status.ok()) {
      context_.counters.record(false, shm::monotonic_ns() - started_ns, 0);
      std::lock_guard lock(mu_);
      queue_locked(error_response(request.id(), status));
      return;
    }
    std::uint64_t serial = 0;
    {
      std::lock_guard lock(mu_);
      serial = next_serial_++;
      in_flight_.emplace(serial, nullptr);  // FanOut::start may answer before it returns
    }
    auto reply = std::make_shared<InferReply>(std::move(parsed.reply));
    const std::size_t strings = parsed.inputs.size();
    std::shared_ptr<FanOut> fan = FanOut::start(
        *client, parsed.inputs, infer_timeout(call_, parsed.timeout), Priority::kNormal,
        [this, serial, reply, strings, started_ns](FanOut::Outcome&& outcome) {
          on_answer(serial, *reply, strings, started_ns, std::move(outcome));
        });
    std::lock_guard lock(mu_);
    const auto it = in_flight_.find(serial);
    if (it != in_flight_.end()) it->second = std::move(fan);
  }

  void on_answer(std::uint64_t serial, const InferReply& reply, std::size_t strings, std::int64_t started_ns,
                 FanOut::Outcome&& outcome) {
    auto response = std::make_unique<Response>();
    if (outcome.error) {
      response = error_response(reply.id, status_for_error(*outcome.error));
    } else {
      fill_infer_response(reply, outcome.results, *response->mutable_infer_response());
    }
    context_.counters.record(!outcome.error, shm::monotonic_ns() - started_ns, strings);
    std::unique_lock lock(mu_);
    in_flight_.erase(serial);
    queue_locked(std::move(response));
    resume_read_locked();
    maybe_finish_locked();
    unlock_and_maybe_delete(lock);
  }

  static std::unique_ptr<Response> error_response(const std::string& id, const grpc::Status& status) {
    auto response = std::make_unique<Response>();
    response->set_error_message(status.error_message());
    response->mutable_infer_response()->set_id(oip::echoed_id(id));
    return response;
  }

  void cancel_all() {
    std::vector<std::shared_ptr<FanOut>> fans;
    {
      std::lock_guard lock(mu_);
      for (auto& [serial, fan] : in_flight_) {
        if (fan) fans.push_back(fan);
      }
    }
    for (auto& fan : fans) fan->cancel();  // outside mu_: an answer may be on its way in
  }

  void queue_locked(std::unique_ptr<Response> response) {
    if (broken_ || finished_) return;
    writes_.push_back(std::move(response));
    if (!writing_) start_write_locked();
  }

  void start_write_locked() {
    writing_ = true;
    StartWrite(writes_.front().get());
  }

  [[nodiscard]] std::size_t unfinished_locked() const noexcept { return in_flight_.size() + writes_.size(); }

  void resume_read_locked() {
    if (read_paused_ && !broken_ && !finished_ && unfinished_locked() < context_.max_stream_in_flight) {
      read_paused_ = false;
      StartRead(&request_);
    }
  }

  void maybe_finish_locked() {
    if (finished_ || !in_flight_.empty() || writing_) return;
    if (broken_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client stopped reading"));
    } else if (reads_done_ && writes_.empty()) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  // The last of gRPC's OnDone and the last answer deletes the reactor. Exactly one of them sees
  // both true: each sets its half under mu_, and nothing comes after either.
  void unlock_and_maybe_delete(std::unique_lock<std::mutex>& lock) {
    const bool last = done_ && in_flight_.empty();
    lock.unlock();
    if (last) delete this;
  }

  grpc::CallbackServerContext& call_;
  ServiceContext& context_;
  inference::ModelInferRequest request_;  // the read in progress lands here
  std::mutex mu_;
  // Guarded by mu_:
  std::unordered_map<std::uint64_t, std::shared_ptr<FanOut>> in_flight_;
  std::uint64_t next_serial_ = 0;
  std::deque<std::unique_ptr<Response>> writes_;  // front: the write in progress, if writing_
  bool writing_ = false;
  bool read_paused_ = false;
  bool reads_done_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool done_ = false;      // gRPC's OnDone has come: no more operations may start
};

}  // namespace

grpc::ServerBidiReactor<inference::ModelInferRequest, Response>* start_stream_infer(grpc::CallbackServerContext* call,
                                                                                   ServiceContext& context) {
  return new StreamInfer(call, context);
}

}  // namespace batchd::grpcfront

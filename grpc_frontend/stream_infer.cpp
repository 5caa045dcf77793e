// ModelStreamInfer: many inferences in flight on one bidirectional stream. Each request read is
// checked and submitted at once and the next read starts; answers are written in the order they
// complete (clients match them by id), one write at a time. A stream holds at most
// max_stream_in_flight requests unanswered or unwritten, max_stream_queued_bytes of answers, and
// strings at the daemon up to half a daemon client's request slots: past any of them it is not
// read until answers drain, so a client that sends without reading costs only its own stream, and
// one stream alone never takes the slots its client shares with every other call (a request
// past them would be refused, "retry later"). The watchdog cancels a stream whose write does not
// move. A request that fails gets an error_message response and the stream goes on, as Triton
// does.
//
// The reactor's operations (StartRead, StartWrite, Finish) are started under mu_, also from the
// daemon client's thread: gRPC never runs a reaction inside the call that starts an operation,
// so no reaction re-enters the lock.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "client_lib/fan_out.hpp"
#include "grpc_frontend/call_tracing.hpp"
#include "grpc_frontend/service.hpp"
#include "oip/model.hpp"
#include "shm/clock.hpp"

namespace batchd::grpcfront {

namespace {

using Response = inference::ModelStreamInferResponse;

// A request message this large is not kept for the next read: protobuf's Clear keeps capacity.
constexpr std::size_t kKeepRequestBytes = 1 << 20;

// Deleted when gRPC is done with it (OnDone) and no inference of it is still at the daemon: a
// late answer must find it alive.
class StreamInfer final : public grpc::ServerBidiReactor<inference::ModelInferRequest, Response>, public Watched {
 public:
  // No lock here: nothing else sees the reactor before the watchdog does, and the watchdog takes
  // mu_ under its own lock, so taking its lock under mu_ could deadlock.
  StreamInfer(grpc::CallbackServerContext* call, ServiceContext& context) : call_(*call), context_(context) {
    if (!take_call(context_)) {
      counted_ = false;
      finished_ = true;
      Finish(too_many_calls(context_));
      return;
    }
    context_.watchdog->add(this);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard lock(mu_);
      if (!ok || broken_ || finished_ || cancelled_) {  // the client closed its side, or the stream is over
        reads_done_ = true;
        maybe_finish_locked();
        return;
      }
    }
    submit(request_);
    if (request_.SpaceUsedLong() > kKeepRequestBytes) request_ = inference::ModelInferRequest();
    std::lock_guard lock(mu_);
    read_paused_ = true;
    resume_read_locked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    queued_bytes_ -= writes_.front().second;
    writes_.pop_front();
    if (!ok) {
      broken_ = true;  // the call is over (cancelled, or its client gone): nothing more can be written
      writes_.clear();
      queued_bytes_ = 0;
    } else if (!writes_.empty()) {
      start_write_locked();
    }
    resume_read_locked();
    maybe_finish_locked();
  }

  void OnCancel() override {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;  // nothing read from now on is submitted
      maybe_finish_locked();
    }
    cancel_all();
  }

  void OnDone() override {
    if (counted_) {
      context_.watchdog->remove(this);  // before mu_: the watchdog takes mu_ under its own lock
      release_call(context_);
    }
    std::unique_lock lock(mu_);
    done_ = true;
    unlock_and_maybe_delete(lock);
  }

  void cancel_if_stalled(std::int64_t stalled_since_ns) override {
    bool stalled = false;
    {
      std::lock_guard lock(mu_);
      stalled = writing_ && write_started_ns_ < stalled_since_ns && !cancelled_;
    }
    if (stalled) call_.TryCancel();  // OnCancel follows, and the write fails
  }

 private:
  void submit(const inference::ModelInferRequest& request) {
    const std::int64_t started_ns = shm::monotonic_ns();
    PreparedInfer prepared;
    if (grpc::Status refused = prepare_infer(call_, request, context_, prepared); !refused.ok()) {
      std::lock_guard lock(mu_);
      queue_locked(error_response(request.id(), refused));
      return;
    }
    std::uint64_t serial = 0;
    {
      std::lock_guard lock(mu_);
      if (cancelled_ || broken_ || finished_) return;
      serial = next_serial_++;
      in_flight_.emplace(serial, nullptr);  // FanOut::start may answer before it returns
      strings_at_daemon_ += prepared.parsed.inputs.size();
      max_strings_at_daemon_ = std::max<std::size_t>(1, prepared.client->slot_count() / 2);
    }
    auto reply = std::make_shared<InferReply>(std::move(prepared.parsed.reply));
    const std::size_t strings = prepared.parsed.inputs.size();
    const tracing::ServerSpan span = prepared.span;
    std::shared_ptr<FanOut> fan = FanOut::start(
        *prepared.client, prepared.parsed.inputs, prepared.timeout,
        RequestOptions{prepared.priority, reply->model->name, prepared.cache_scope, span.for_daemon()},
        [this, serial, reply, strings, started_ns, span](FanOut::Outcome&& outcome) {
          on_answer(serial, *reply, strings, started_ns, span, std::move(outcome));
        });
    bool cancel = false;
    {
      std::lock_guard lock(mu_);
      const auto it = in_flight_.find(serial);
      if (it != in_flight_.end()) {
        it->second = fan;
        cancel = cancelled_;  // OnCancel came while it was being submitted and could not see it
      }
    }
    if (cancel) fan->cancel();
  }

  void on_answer(std::uint64_t serial, const InferReply& reply, std::size_t strings, std::int64_t started_ns,
                 const tracing::ServerSpan& span, FanOut::Outcome&& outcome) {
    std::unique_ptr<Response> response;
    const grpc::Status status = outcome.error ? status_for_error(*outcome.error, context_.overload) : grpc::Status::OK;
    if (outcome.error) {
      response = error_response(reply.id, status);
    } else {
      response = std::make_unique<Response>();
      fill_infer_response(reply, outcome.results, *response->mutable_infer_response());
    }
    end_call_trace(context_.tracer, span, "ModelStreamInfer", reply.model->name, status);
    context_.counters.record(reply.model->id, !outcome.error, shm::monotonic_ns() - started_ns, strings);
    std::unique_lock lock(mu_);
    in_flight_.erase(serial);
    strings_at_daemon_ -= strings;
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
        if (fan) fans.push_back(fan);  // one still being submitted cancels itself (submit)
      }
    }
    for (auto& fan : fans) fan->cancel();  // outside mu_: an answer may be on its way in
  }

  void queue_locked(std::unique_ptr<Response> response) {
    if (broken_ || finished_) return;
    const std::size_t bytes = response->ByteSizeLong();
    queued_bytes_ += bytes;
    writes_.emplace_back(std::move(response), bytes);
    if (!writing_) start_write_locked();
  }

  void start_write_locked() {
    writing_ = true;
    write_started_ns_ = shm::monotonic_ns();
    StartWrite(writes_.front().first.get());
  }

  [[nodiscard]] bool full_locked() const noexcept {
    return in_flight_.size() + writes_.size() >= context_.max_stream_in_flight ||
           queued_bytes_ >= context_.max_stream_queued_bytes || strings_at_daemon_ >= max_strings_at_daemon_;
  }

  void resume_read_locked() {
    if (read_paused_ && !broken_ && !finished_ && !cancelled_ && !full_locked()) {
      read_paused_ = false;
      StartRead(&request_);
    }
  }

  void maybe_finish_locked() {
    if (finished_ || !in_flight_.empty() || writing_) return;
    if (broken_) {
      finished_ = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled or its client is gone"));
    } else if ((reads_done_ || cancelled_) && writes_.empty()) {
      finished_ = true;
      Finish(cancelled_ ? grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled") : grpc::Status::OK);
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
  bool counted_ = true;                   // holds one of --max-calls (refused at the start otherwise)
  inference::ModelInferRequest request_;  // the read in progress lands here
  std::mutex mu_;
  // Guarded by mu_:
  std::unordered_map<std::uint64_t, std::shared_ptr<FanOut>> in_flight_;
  std::uint64_t next_serial_ = 0;
  std::size_t strings_at_daemon_ = 0;  // of in_flight_
  // Half the slots of the daemon client the last request went to (a daemon's clients all have
  // as many); none until a request has gone.
  std::size_t max_strings_at_daemon_ = SIZE_MAX;
  // Answers to write, with their sizes; front: the write in progress, if writing_.
  std::deque<std::pair<std::unique_ptr<Response>, std::size_t>> writes_;
  std::size_t queued_bytes_ = 0;  // of writes_
  std::int64_t write_started_ns_ = 0;
  bool writing_ = false;
  bool read_paused_ = false;
  bool reads_done_ = false;
  bool cancelled_ = false;  // OnCancel has come: the call is over
  bool broken_ = false;     // a write failed
  bool finished_ = false;
  bool done_ = false;       // gRPC's OnDone has come: no more operations may start
};

}  // namespace

grpc::ServerBidiReactor<inference::ModelInferRequest, Response>* start_stream_infer(grpc::CallbackServerContext* call,
                                                                                   ServiceContext& context) {
  return new StreamInfer(call, context);
}

}  // namespace batchd::grpcfront

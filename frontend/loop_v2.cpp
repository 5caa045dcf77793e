// The event loop's side of Open Inference Protocol inferences: a tensor of N strings goes to the
// daemon as N requests in one submission (batched there with everyone else's), their answers
// gather here, and the last one (or the first failure) writes the one response, in input order.
#include <chrono>

#include "frontend/loop_internal.hpp"

namespace batchd::http {

namespace {

// A callback's key: the call's serial above, the string's index below (max_infer_strings is at
// most 65536), so the callback's capture fits std::function's inline storage.
constexpr unsigned kIndexBits = 16;
constexpr std::uint64_t kIndexMask = (std::uint64_t{1} << kIndexBits) - 1;


}  // namespace

void EventLoop::on_v2_request(Conn& conn, std::uint64_t seq, Request&& request) {
  V2Action action = v2_api_->route(request);
  if (const Response* response = std::get_if<Response>(&action)) {
    answer(conn, seq, *response, now_ns_);
    return;
  }
  V2Infer& infer = std::get<V2Infer>(action);
  if (infer.inputs.empty()) {  // a [0] tensor: answered at once, with an empty one
    answer(conn, seq, v2_infer_response(infer.reply, {}), now_ns_);
    return;
  }
  if (link_.client() == nullptr) {
    answer(conn, seq, v2_error(503, "not attached to the batchd daemon: " + link_.last_error(), 1), now_ns_);
    return;
  }
  submit_v2(Caller{conn.index, conn.generation, seq, now_ns_}, conn, std::move(infer));
}

void EventLoop::submit_v2(const Caller& caller, Conn& conn, V2Infer&& infer) {
  Client& client = *link_.client();
  const std::uint64_t serial = next_v2_serial_++;
  const std::size_t count = infer.inputs.size();
  v2_submissions_.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    Client::AsyncSubmission& submission = v2_submissions_[i];
    submission.input = infer.inputs[i];
    submission.priority = infer.priority;
    submission.refused.reset();
    const std::uint64_t key = (serial << kIndexBits) | i;
    submission.done = [this, key](Result&& result) { on_v2_answer(key, std::move(result)); };
  }
  const std::size_t admitted = client.submit_many_async(v2_submissions_, infer.timeout);
  auto call = std::make_unique<V2Call>();
  call->caller = caller;
  call->reply = std::move(infer.reply);
  call->results.resize(count);
  call->ids.reserve(admitted);
  const Error* refusal = nullptr;
  for (Client::AsyncSubmission& submission : v2_submissions_) {
    submission.done = nullptr;  // the admitted ones' callbacks were moved into the client
    if (submission.refused) {
      if (refusal == nullptr) refusal = &*submission.refused;
      continue;
    }
    call->ids.push_back(submission.id);
    conn.owed.emplace_back(caller.seq, submission.id);
  }
  call->remaining = admitted;
  answers_owed_ += static_cast<std::int64_t>(admitted);
  metrics_.add_in_flight(static_cast<std::int64_t>(admitted));
  // One string refused at once (the daemon full, most likely) fails the whole inference now:
  // the others are withdrawn, and their callbacks still come to the record kept below.
  if (refusal != nullptr) {
    for (const std::uint64_t id : call->ids) client.cancel(id);
    finish_v2(*call, v2_response_for_error(*refusal));
  }
  if (call->remaining != 0) v2_calls_.emplace(serial, std::move(call));
}

void EventLoop::on_v2_answer(std::uint64_t key, Result&& result) {
  --answers_owed_;
  metrics_.add_in_flight(-1);
  const auto it = v2_calls_.find(key >> kIndexBits);
  if (it == v2_calls_.end()) return;  // cannot happen: a call is kept until its last callback
  V2Call& call = *it->second;
  --call.remaining;
  if (!call.answered) {
    if (!result.ok()) {
      // The first failure answers for the request; its other strings are withdrawn.
      Client* client = link_.client();
      if (client != nullptr) {
        for (const std::uint64_t id : call.ids) client->cancel(id);
      }
      finish_v2(call, v2_response_for_error(result.error()));
    } else {
      call.results[key & kIndexMask] = std::move(result);
      if (call.remaining == 0) finish_v2(call, v2_infer_response(call.reply, call.results));
    }
  }
  if (call.remaining == 0) v2_calls_.erase(it);
}

void EventLoop::finish_v2(V2Call& call, const Response& response) {
  call.answered = true;
  metrics_.record_inference(response.status == 200, now_ns_ - call.caller.started_ns, call.results.size());
  Conn* conn = lookup(call.caller.index, call.caller.generation);
  if (conn == nullptr || conn->state == Conn::State::kClosing) {
    metrics_.answer_dropped();  // the caller left; its strings were withdrawn if still unclaimed
    return;
  }
  std::erase_if(conn->owed, [&](const auto& owed) { return owed.first == call.caller.seq; });
  answer(*conn, call.caller.seq, response, call.caller.started_ns);
}

}  // namespace batchd::http

// The event loop's side of Open Inference Protocol inferences: a tensor of N strings goes to the
// daemon through a FanOut (N requests in one submission, batched there with everyone else's) and
// its one answer, in input order or the first failure, is written when it comes. The loop polls
// the client, so the answer comes on the loop's thread.
#include "client_lib/fan_out.hpp"
#include "frontend/loop_internal.hpp"
#include "oip/served_models.hpp"

namespace batchd::http {

const oip::ModelCatalog& EventLoop::models() {
  // A daemon that publishes no table (one from before models) is asked again a second later too.
  if (catalog_read_ns_ == 0 || now_ns_ - catalog_read_ns_ >= oip::kCatalogReadNs) {
    if (Client* client = link_.client()) {
      catalog_read_ns_ = now_ns_;
      catalog_ = oip::served_catalog(client->daemon_status());
    }
  }
  return catalog_ != nullptr ? *catalog_ : oip::default_catalog();
}

void EventLoop::on_v2_request(Conn& conn, std::uint64_t seq, Request&& request, const grants::Resolved& granted) {
  V2Action action = v2_api_->route(request);
  if (const Response* response = std::get_if<Response>(&action)) {
    answer(conn, seq, *response, now_ns_);
    return;
  }
  if (V2ModelControl* control = std::get_if<V2ModelControl>(&action)) {
    control_model(Caller{conn.index, conn.generation, seq, now_ns_}, std::move(*control));
    return;
  }
  V2Infer& infer = std::get<V2Infer>(action);
  Client* client = link_.client();
  if (client == nullptr) {
    answer(conn, seq, v2_error(503, "not attached to the batchd daemon: " + link_.last_error(), 1), now_ns_);
    return;
  }
  const Caller caller{conn.index, conn.generation, seq, now_ns_};
  const auto strings = static_cast<std::int64_t>(infer.inputs.size());
  // Counted before start: a refusal answers before start returns.
  ++answers_owed_;
  metrics_.add_in_flight(strings);
  auto reply = std::make_shared<V2Reply>(std::move(infer.reply));
  const tracing::ServerSpan span = begin_trace(request, reply->model->name);
  // The description lives in `reply` (held below) while start reads its name.
  std::shared_ptr<FanOut> fan = FanOut::start(
      *client, infer.inputs, infer.timeout,
      RequestOptions{admit(infer.priority, granted.max), reply->model->name, granted.cache_scope, span.for_daemon()},
      [this, caller, reply, strings, span](FanOut::Outcome&& outcome) {
        on_v2_answer(caller, *reply, strings, span, std::move(outcome));
      });
  // Kept with the connection until answered, so a caller that goes withdraws its strings. (A
  // refusal was answered inside start; other answers come from this thread's poll, later.)
  if (!fan->answered()) conn.fans.emplace_back(seq, std::move(fan));
}

void EventLoop::control_model(const Caller& caller, V2ModelControl&& control) {
  ModelControlQueue* queue = context_.model_control;
  if (queue == nullptr) {  // V2Api refuses it first; a second guard costs nothing
    answer_caller(caller, v2_error(403, "model control is off"));
    return;
  }
  JobsInboxes& inboxes = jobs_.inboxes();
  const unsigned index = context_.index;
  // The answer comes on the queue's thread and is handed to this loop; a caller gone meanwhile is
  // not found by answer_caller.
  const bool queued = queue->submit(
      std::move(control.model), control.action,
      [this, &inboxes, index, caller](std::optional<std::string> account, const Error& error) {
        Response response;  // 200 with an empty JSON object, as Triton answers
        response.body = "{}";
        if (!account) response = v2_response_for_error(error, options_.overload_status);
        inboxes.post(index, [this, caller, response = std::move(response)] { answer_caller(caller, response); });
      });
  if (!queued) answer_caller(caller, v2_error(503, "too many load and unload requests wait already; retry", 1));
}

void EventLoop::on_v2_answer(const Caller& caller, const V2Reply& reply, std::int64_t strings,
                             const tracing::ServerSpan& span, FanOut::Outcome&& outcome) {
  --answers_owed_;
  metrics_.add_in_flight(-strings);
  const Response response =
      outcome.error ? v2_response_for_error(*outcome.error, options_.overload_status) : v2_infer_response(reply, outcome.results);
  metrics_.record_inference(reply.model->id, response.status == 200, now_ns_ - caller.started_ns,
                            static_cast<std::size_t>(strings));
  end_trace(span, "/v2/models/{model_name}/infer", reply.model->name, response.status);
  Conn* conn = lookup(caller.index, caller.generation);
  if (conn == nullptr || conn->state == Conn::State::kClosing) {
    metrics_.answer_dropped();  // the caller left; its strings were withdrawn if still unclaimed
    return;
  }
  std::erase_if(conn->fans, [&](const auto& fan) { return fan.first == caller.seq; });
  answer(*conn, caller.seq, response, caller.started_ns);
}

}  // namespace batchd::http

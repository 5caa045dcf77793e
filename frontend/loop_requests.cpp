// The event loop's side of requests: routing each one, submitting it to the daemon without
// waiting, harvesting answers when the client's eventfd fires, and what /readyz and /metrics say.
#include <poll.h>

#include <spdlog/spdlog.h>

#include <cerrno>

#include "client_lib/daemon_readiness.hpp"
#include "frontend/http_grant.hpp"
#include "frontend/loop_internal.hpp"
#include "oip/served_models.hpp"

namespace batchd::http {

// What an answer callback needs to find its way back; the connection may be gone by then, which
// the slot's generation tells.
struct EventLoop::Answer {
  EventLoop* loop;
  std::uint32_t index;
  std::uint32_t generation;
  std::uint64_t seq;
  std::int64_t started_ns;
  BodyFormat format;
  tracing::ServerSpan span;  // traced: its server span, ended with the answer
  std::string_view route;    // for the span's name: a literal
};

void EventLoop::on_request(Conn& conn, std::uint64_t seq, Request&& request) {
  const std::string_view path(request.target().data(), request.target().size());
  // The loop runs under the daemon's grant for every caller: each request may use only what the
  // operator granted its caller (priority_grants.hpp).
  const grants::Resolved granted = granted_class(*context_.grants, request, conn.trusted_proxy, metrics_.grants());
  if (is_jobs_target(path)) {
    on_jobs_request(conn, seq, std::move(request), granted.max);
    return;
  }
  if (is_v2_target(path)) {
    on_v2_request(conn, seq, std::move(request), granted);
    return;
  }
  Action action = api_->route(request);
  if (const Response* response = std::get_if<Response>(&action)) {
    answer(conn, seq, *response, now_ns_);
    return;
  }
  const SubmitAction& submit = std::get<SubmitAction>(action);
  Client* client = link_.client();
  // A client between daemons still takes requests: they run once it re-attaches, or get 503 at
  // their deadline. Only a loop that never attached answers 503 at once.
  if (client == nullptr) {
    answer(conn, seq,
           error_response(503, "daemon_unavailable", "not attached to the batchd daemon: " + link_.last_error(), 1),
           now_ns_);
    return;
  }
  const std::string_view route = submit.model.empty() ? "/v1/batchstring" : "/v1/models/{model_name}";
  const Answer target{this, conn.index, conn.generation, seq, now_ns_, submit.format, begin_trace(request, submit.model),
                      route};
  std::uint64_t id = 0;
  std::optional<Error> refused = client->submit_async(
      submit.input, submit.timeout,
      RequestOptions{admit(submit.priority, granted.max), submit.model, granted.cache_scope, target.span.for_daemon()},
      [target](Result&& result) { target.loop->on_answer(target, std::move(result)); }, &id);
  if (refused) {
    const Response response = response_for_error(*refused, options_.overload_status);
    end_trace(target.span, route, submit.model, response.status);
    answer(conn, seq, response, now_ns_);
    return;
  }
  conn.owed.emplace_back(seq, id);
  ++answers_owed_;
  metrics_.add_in_flight(1);
}

Priority EventLoop::admit(Priority claimed, Priority granted) noexcept {
  return admit_priority(claimed, granted, metrics_.grants());
}

void EventLoop::answer(Conn& conn, std::uint64_t seq, const Response& response, std::int64_t started_ns) {
  metrics_.record_response(response.status, now_ns_ - started_ns);
  conn.http.complete(seq, response);
  mark_dirty(conn);
}

void EventLoop::on_answer(const Answer& target, Result&& result) {
  --answers_owed_;
  metrics_.add_in_flight(-1);
  Conn* conn = lookup(target.index, target.generation);
  const Response response = response_for_result(std::move(result), target.format, options_.overload_status);
  end_trace(target.span, target.route, {}, response.status);
  if (conn == nullptr || conn->state == Conn::State::kClosing) {
    metrics_.answer_dropped();  // the caller left; its request was withdrawn if still unclaimed
    return;
  }
  std::erase_if(conn->owed, [&](const auto& owed) { return owed.first == target.seq; });
  answer(*conn, target.seq, response, target.started_ns);
}

void EventLoop::withdraw_owed(Conn& conn) {
  Client* client = link_.client();
  if (client != nullptr) {
    for (const auto& [seq, id] : conn.owed) client->cancel(id);
  }
  conn.owed.clear();
  for (const auto& [seq, fan] : conn.fans) fan->cancel();
  conn.fans.clear();
}

void EventLoop::post_daemon_event() {
  Client* client = link_.client();
  if (client == nullptr || daemon_event_posted_) return;
  io_uring_sqe* entry = sqe();
  if (daemon_event_by_poll_) {
    io_uring_prep_poll_add(entry, client->event_fd(), POLLIN);
  } else {
    io_uring_prep_read(entry, client->event_fd(), &daemon_event_value_, sizeof(daemon_event_value_), 0);
  }
  io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kDaemonEvent), 0, 0));
  daemon_event_posted_ = true;
}

void EventLoop::on_daemon_event(int res) {
  daemon_event_posted_ = false;
  if (res == -EAGAIN && !daemon_event_by_poll_) {
    // The client's eventfd is non-blocking, and some kernels then fail the read at once instead
    // of waiting: watch it with poll, and let poll() below read it.
    spdlog::debug("batchd-http: eventfd read would block; waiting on it with poll instead");
    daemon_event_by_poll_ = true;
  }
  poll_daemon();
}

void EventLoop::poll_daemon() {
  Client* client = link_.client();
  if (client == nullptr) return;
  client->poll();
  // The client re-attaches by itself when the daemon restarts and keeps what it owes meanwhile
  // (each request is answered, at the latest by its deadline), so it is kept across an outage.
  metrics_.set_attached(client->connected());
  post_daemon_event();
}

// The jobs store has no say here, even when Redis is down: a node whose Redis is gone still
// answers /v1/batchstring, and every node shares the one Redis, so failing readiness on it would
// take the whole fleet out of the balancer for what only the jobs calls need (they answer 503
// jobs_store_unavailable by themselves).
Readiness EventLoop::readiness() {
  if (stopping_ || context_.leaving->load(std::memory_order_acquire)) {
    return {false, "draining", "the server is shutting down"};
  }
  Client* client = link_.client();
  if (client == nullptr || !client->connected()) {
    return {false, "daemon_unavailable", "not attached to the batchd daemon: " + link_.last_error()};
  }
  // Every loop, not just the one answering: the port spreads callers over all of them.
  const unsigned attached = context_.metrics->attached_workers();
  if (attached < context_.metrics->workers()) {
    return {false, "daemon_unavailable",
            std::to_string(context_.metrics->workers() - attached) + " worker(s) not yet attached to the daemon"};
  }
  if (std::optional<NotReady> not_ready = daemon_not_ready(*client, options_.ready_max_queue)) {
    return {false, not_ready->code, std::move(not_ready->message)};
  }
  const std::uint64_t capacity = std::uint64_t{client->slot_count()} * options_.workers;
  const auto in_flight = static_cast<std::uint64_t>(std::max<std::int64_t>(0, context_.metrics->in_flight()));
  if (in_flight * 10 >= capacity * 9) {
    return {false, "overloaded",
            "this front-end has " + std::to_string(in_flight) + " of its " + std::to_string(capacity) +
                " request slots in flight"};
  }
  return {true, {}, {}};
}

std::string EventLoop::metrics_text() {
  Client* client = link_.client();
  std::string text;
  if (client == nullptr || !client->connected()) {
    text = context_.metrics->render(nullptr);
  } else {
    const DaemonStatus status = client->daemon_status();
    text = context_.metrics->render(&status);
  }
  jobs_.render_metrics(text);
  return text;
}

InferStatistics EventLoop::infer_statistics(std::uint32_t model) { return context_.metrics->infer_statistics(model); }

std::vector<oip::ModelTimes> EventLoop::model_times() {
  Client* client = link_.client();
  if (client == nullptr) return {};
  return oip::model_times(client->daemon_status());
}

std::uint32_t EventLoop::max_input_bytes() {
  Client* client = link_.client();
  return client != nullptr ? client->max_input_bytes() : 0;
}

}  // namespace batchd::http

// Open loop over HTTP. A few I/O threads each pace their share of the schedule (request ids
// k, k + W, k + 2W, ... for thread k of W) and drive their share of the connections with epoll:
// a due request goes out on the least-loaded connection with room in its pipeline, or waits
// until one has room; either way its latency counts from its intended send time, so a server
// that falls behind cannot hide its queue. A timerfd wakes the thread at the next intended time
// with nanosecond precision (epoll_wait's own timeout has only milliseconds).
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tools/stress_clock.hpp"
#include "tools/stress_http_loops.hpp"
#include "tools/stress_http_pipeline.hpp"

namespace batchd::stress {

namespace {

using http::IoStatus;
using http::Pending;
using http::PipeConnection;
using State = PipeConnection::State;

constexpr std::int64_t kReconnectNs = 100'000'000;
// While requests are outstanding the thread wakes at least this often to expire deadlines.
constexpr std::int64_t kHousekeepingNs = 10'000'000;
constexpr std::uint64_t kTimerTag = std::numeric_limits<std::uint64_t>::max();
constexpr int kMaxEvents = 256;

class IoWorker {
 public:
  IoWorker(HttpRunContext& ctx, unsigned index, std::vector<int> fds, Tally& tally);
  ~IoWorker();
  IoWorker(const IoWorker&) = delete;
  IoWorker& operator=(const IoWorker&) = delete;
  void run();

 private:
  [[nodiscard]] std::int64_t intended_ns(std::uint64_t id) const noexcept;
  [[nodiscard]] bool finished() const noexcept;
  void generate(std::int64_t now);
  PipeConnection* least_loaded() noexcept;
  void dispatch();
  void fail_waiting_if_unreachable();
  void expire(std::int64_t now);
  void reconnect(std::int64_t now);
  void arm_timer(std::int64_t now);
  void wait_and_handle();
  void on_event(const epoll_event& event);
  void finish_connect(PipeConnection& c);
  void on_readable(PipeConnection& c);
  void take_responses(PipeConnection& c, std::int64_t done_ns);
  void flush(PipeConnection& c);
  void set_wants_out(PipeConnection& c, bool wants_out);
  void watch(PipeConnection& c, std::size_t index);
  void close_connection(PipeConnection& c, std::size_t kind, std::int64_t retry_ns);
  void requeue_inflight(PipeConnection& c);

  HttpRunContext& ctx_;
  const unsigned stride_;
  const double period_ns_;  // between consecutive ids of the whole schedule
  const std::uint64_t cap_;
  const std::int64_t end_ns_;
  const std::int64_t deadline_ns_;
  std::uint64_t next_id_;
  bool generating_ = true;
  bool unreachable_ = false;  // the latest connect attempt failed
  int epoll_ = -1, timer_ = -1;
  std::vector<PipeConnection> connections_;
  std::deque<Pending> waiting_;  // due, but no connection had room yet
  Recorder recorder_;
  http::RequestEncoder encoder_;
  http::BodyDecoder decoder_;
  std::string input_;
};

IoWorker::IoWorker(HttpRunContext& ctx, unsigned index, std::vector<int> fds, Tally& tally)
    : ctx_(ctx), stride_(ctx.options.io_threads), period_ns_(1e9 / ctx.options.rate),
      cap_(ctx.options.requests.value_or(std::numeric_limits<std::uint64_t>::max())),
      end_ns_(run_end_ns(ctx.options, ctx.start_ns)),
      deadline_ns_(http_client_deadline(ctx.options).count()), next_id_(index),
      connections_(fds.size()), recorder_(tally, ctx.live, ctx.options.cost, ctx.options.sim_repeat),
      encoder_(ctx.url, ctx.options.http_timeout) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_ < 0 || timer_ < 0) {
    throw std::runtime_error(std::string("epoll/timerfd: ") + std::strerror(errno));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kTimerTag;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, timer_, &event);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    connections_[i].fd = fds[i];
    connections_[i].state = State::kOpen;
    watch(connections_[i], i);
  }
  input_.reserve(ctx.inputs.max_bytes());
  const double expected = ctx.options.duration_s ? ctx.options.rate * *ctx.options.duration_s
                                                 : static_cast<double>(cap_);
  tally.latencies_ns.reserve(static_cast<std::size_t>(
      std::min(expected / stride_ * 1.01 + 1024.0, double{1U << 24})));
}

IoWorker::~IoWorker() {
  for (PipeConnection& c : connections_) c.close_socket();
  if (timer_ >= 0) ::close(timer_);
  if (epoll_ >= 0) ::close(epoll_);
}

std::int64_t IoWorker::intended_ns(std::uint64_t id) const noexcept {
  // From the start and the id rather than accumulated, so rounding never drifts the schedule.
  return ctx_.start_ns + std::llround(static_cast<double>(id) * period_ns_);
}

bool IoWorker::finished() const noexcept {
  if (generating_ || !waiting_.empty()) return false;
  for (const PipeConnection& c : connections_) {
    if (!c.inflight.empty()) return false;
  }
  return true;
}

void IoWorker::generate(std::int64_t now) {
  while (generating_) {
    const std::int64_t due = intended_ns(next_id_);
    if (next_id_ >= cap_ || due >= end_ns_ || ctx_.interrupted.load(std::memory_order_relaxed)) {
      generating_ = false;
    } else if (due <= now) {
      recorder_.sent();
      waiting_.push_back(Pending{next_id_, due, 0});
      next_id_ += stride_;
    } else {
      return;
    }
  }
}

PipeConnection* IoWorker::least_loaded() noexcept {
  PipeConnection* best = nullptr;
  for (PipeConnection& c : connections_) {
    if (c.state != State::kOpen || c.inflight.size() >= ctx_.options.pipeline_depth) continue;
    if (best == nullptr || c.inflight.size() < best->inflight.size()) best = &c;
    if (best->inflight.empty()) break;  // cannot do better than an idle one
  }
  return best;
}

void IoWorker::dispatch() {
  while (!waiting_.empty()) {
    PipeConnection* c = least_loaded();
    if (c == nullptr) break;
    Pending p = waiting_.front();
    waiting_.pop_front();
    ctx_.inputs.build(p.id, input_);
    encoder_.append(c->out, input_);
    p.sent_ns = now_ns();
    c->inflight.push_back(p);
  }
  // One write per connection for all it was given, not one per request.
  for (PipeConnection& c : connections_) {
    if (c.state == State::kOpen && c.writes_pending() && !c.wants_out) flush(c);
  }
  fail_waiting_if_unreachable();
}

void IoWorker::fail_waiting_if_unreachable() {
  // With no connection up or coming up and the server refusing new ones, waiting would only
  // turn "the server is gone" into timeouts: say what it is at once, as the shared-memory
  // client does.
  if (waiting_.empty() || !unreachable_) return;
  for (const PipeConnection& c : connections_) {
    if (c.state != State::kClosed) return;
  }
  for (std::size_t i = 0; i < waiting_.size(); ++i) recorder_.failed(ErrorCode::kDaemonUnavailable);
  waiting_.clear();
}

void IoWorker::expire(std::int64_t now) {
  while (!waiting_.empty() && now - waiting_.front().intended_ns > deadline_ns_) {
    recorder_.failed(ErrorCode::kTimeout);
    waiting_.pop_front();
  }
  for (PipeConnection& c : connections_) {
    // Responses come in order, so nothing behind an overdue one can be read either: the
    // connection is given up and all it carried counts as timed out.
    if (!c.inflight.empty() && now - c.inflight.front().sent_ns > deadline_ns_) {
      close_connection(c, error_kind(ErrorCode::kTimeout), now);  // slow, not gone: at once
    }
  }
}

void IoWorker::reconnect(std::int64_t now) {
  if (!generating_ && waiting_.empty()) return;
  for (std::size_t i = 0; i < connections_.size(); ++i) {
    PipeConnection& c = connections_[i];
    if (c.state != State::kClosed || c.retry_ns > now) continue;
    c.retry_ns = now + kReconnectNs;
    c.fd = http::start_connect(ctx_.endpoint);
    if (c.fd < 0) {
      http::warn_once(fmt::format("cannot connect to {}: {}", ctx_.endpoint.text, std::strerror(errno)));
      unreachable_ = true;
      continue;
    }
    c.state = State::kConnecting;
    watch(c, i);
  }
}

void IoWorker::arm_timer(std::int64_t now) {
  std::int64_t wake = std::numeric_limits<std::int64_t>::max();
  if (generating_) wake = intended_ns(next_id_);
  if (!finished()) wake = std::min(wake, now + kHousekeepingNs);
  itimerspec spec{};
  // Zero would disarm the timer: a wake time already past is clamped to 1 ns, which fires at once.
  wake = std::max<std::int64_t>(wake, 1);
  spec.it_value.tv_sec = wake / 1'000'000'000;
  spec.it_value.tv_nsec = wake % 1'000'000'000;
  ::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void IoWorker::wait_and_handle() {
  std::array<epoll_event, kMaxEvents> events;
  const int n = ::epoll_wait(epoll_, events.data(), kMaxEvents, -1);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kTimerTag) {
      std::uint64_t expirations = 0;
      [[maybe_unused]] const ssize_t r = ::read(timer_, &expirations, sizeof(expirations));
    } else {
      on_event(events[i]);
    }
  }
}

void IoWorker::on_event(const epoll_event& event) {
  PipeConnection& c = connections_[event.data.u64];
  if (c.state == State::kConnecting) {
    if ((event.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) finish_connect(c);
    return;
  }
  if (c.state != State::kOpen) return;  // closed by an earlier event of this batch
  if ((event.events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) on_readable(c);
  if (c.state == State::kOpen && (event.events & EPOLLOUT) != 0) flush(c);
}

void IoWorker::finish_connect(PipeConnection& c) {
  if (const std::string why = http::connect_result(c.fd); !why.empty()) {
    http::warn_once(fmt::format("cannot connect to {}: {}", ctx_.endpoint.text, why));
    close_connection(c, error_kind(ErrorCode::kDaemonUnavailable), now_ns() + kReconnectNs);
    unreachable_ = true;
    return;
  }
  unreachable_ = false;
  c.state = State::kOpen;
  set_wants_out(c, false);
}

void IoWorker::on_readable(PipeConnection& c) {
  const IoStatus status = c.fill();
  const int fill_errno = errno;
  // One time stamp for everything this read brought, taken before any answer is checked, so
  // the reference hashing is not charged to the server.
  take_responses(c, now_ns());
  if (c.state != State::kOpen || status == IoStatus::kOk) return;
  if (status == IoStatus::kError) {
    http::warn_once(fmt::format("receive from {}: {}", ctx_.endpoint.text, std::strerror(fill_errno)));
  } else if (!c.inflight.empty()) {
    http::warn_once(fmt::format("{} closed a connection with requests outstanding", ctx_.endpoint.text));
  }
  // An idle connection the server closed is simply reopened; a broken one after a pause.
  const bool idle_close = status == IoStatus::kClosed && c.inflight.empty();
  close_connection(c, error_kind(ErrorCode::kDaemonUnavailable),
                   now_ns() + (idle_close ? 0 : kReconnectNs));
}

void IoWorker::take_responses(PipeConnection& c, std::int64_t done_ns) {
  std::size_t used = 0;
  for (;;) {
    const http::Response r = http::frame_response(std::string_view(c.in).substr(used));
    if (r.framing == http::Framing::kIncomplete) break;
    const bool unasked = r.framing == http::Framing::kComplete && r.status >= 200 && c.inflight.empty();
    if (r.framing == http::Framing::kBad || unasked) {
      http::warn_once(fmt::format("bad response from {}: {}", ctx_.endpoint.text,
                                  unasked ? "a response to no request" : r.problem));
      close_connection(c, error_kind(ErrorCode::kProtocolError), now_ns());  // it is up: at once
      return;
    }
    used += r.total_bytes;
    if (r.status < 200) continue;  // 1xx: informational, answers nothing
    const Pending p = c.inflight.front();
    c.inflight.pop_front();
    ctx_.inputs.build(p.id, input_);  // inputs are a pure function of the id
    record_response(recorder_, decoder_, r.status,
                    std::string_view(c.in).substr(used - r.body_bytes, r.body_bytes), input_,
                    done_ns - p.intended_ns);
    if (r.close) {
      requeue_inflight(c);
      close_connection(c, 0, now_ns());  // a polite close: reconnect at once
      return;
    }
  }
  c.in.erase(0, used);
}

void IoWorker::flush(PipeConnection& c) {
  if (c.flush() == IoStatus::kError) {
    http::warn_once(fmt::format("send to {}: {}", ctx_.endpoint.text, std::strerror(errno)));
    close_connection(c, error_kind(ErrorCode::kDaemonUnavailable), now_ns() + kReconnectNs);
    return;
  }
  set_wants_out(c, c.writes_pending());
}

void IoWorker::set_wants_out(PipeConnection& c, bool wants_out) {
  if (c.wants_out == wants_out) return;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (wants_out ? EPOLLOUT : 0U);
  event.data.u64 = static_cast<std::uint64_t>(&c - connections_.data());
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &event);
  c.wants_out = wants_out;
}

void IoWorker::watch(PipeConnection& c, std::size_t index) {
  // A connecting socket reports the end of its connect as writable.
  c.wants_out = c.state == State::kConnecting;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (c.wants_out ? EPOLLOUT : 0U);
  event.data.u64 = index;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &event);
}

void IoWorker::close_connection(PipeConnection& c, std::size_t kind, std::int64_t retry_ns) {
  for (std::size_t i = 0; i < c.inflight.size(); ++i) recorder_.failed_kind(kind);
  c.inflight.clear();
  c.close_socket();
  c.retry_ns = retry_ns;
}

void IoWorker::requeue_inflight(PipeConnection& c) {
  // The server said it closes after the response just read, so it never took the requests
  // behind it: they go out again, in order, ahead of newer ones, their intended times unchanged.
  while (!c.inflight.empty()) {
    waiting_.push_front(c.inflight.back());
    c.inflight.pop_back();
  }
}

void IoWorker::run() {
  // The default 50 us timer slack would make every paced send late by up to that much, and
  // that lateness would be charged to the server.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  while (!finished()) {
    const std::int64_t now = now_ns();
    generate(now);
    expire(now);
    reconnect(now);
    dispatch();
    if (finished()) break;
    arm_timer(now_ns());
    wait_and_handle();
  }
}

}  // namespace

RunResult run_http_open_loop(HttpRunContext& ctx) {
  const unsigned workers = ctx.options.io_threads;
  std::vector<Tally> tallies(workers);
  std::vector<std::unique_ptr<IoWorker>> io;
  ctx.start_ns = now_ns();
  for (unsigned k = 0; k < workers; ++k) {
    // Worker k takes connections k, k + workers, ...: every worker gets at least one.
    std::vector<int> fds;
    for (std::size_t i = k; i < ctx.fds.size(); i += workers) fds.push_back(ctx.fds[i]);
    io.push_back(std::make_unique<IoWorker>(ctx, k, std::move(fds), tallies[k]));
  }
  ctx.fds.clear();
  {
    std::vector<std::jthread> threads;
    for (auto& worker : io) threads.emplace_back([&worker] { worker->run(); });
  }
  RunResult result;
  result.wall_s = static_cast<double>(now_ns() - ctx.start_ns) / 1e9;
  io.clear();
  for (Tally& tally : tallies) result.tally.merge(std::move(tally));
  return result;
}

}  // namespace batchd::stress

// The HTTP transport's open-loop lane: its share of the connections, driven by one thread with
// epoll. A submitted request goes out on the least-loaded connection with room in its pipeline,
// or waits until one has room. HTTP/1.1 answers pipelined requests in order, so each
// connection's FIFO says which request a response answers. A timerfd wakes the thread when the
// loop wants to send next, with nanosecond precision (epoll_wait's own timeout has only
// milliseconds).
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/stress_clock.hpp"
#include "tools/stress_http_pipeline.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_http_response.hpp"
#include "tools/stress_http_transport.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

namespace {

using http::IoStatus;
using http::Pending;
using http::PipeConnection;
using Step = http::ResponseReader::Step;
using State = PipeConnection::State;

constexpr std::int64_t kReconnectNs = 100'000'000;
// While requests are outstanding the thread wakes at least this often to expire deadlines.
constexpr std::int64_t kHousekeepingNs = 10'000'000;
constexpr std::uint64_t kTimerTag = std::numeric_limits<std::uint64_t>::max();
constexpr int kMaxEvents = 256;

class HttpLane final : public OpenLane {
 public:
  HttpLane(const HttpTarget& target, std::vector<int> fds);
  ~HttpLane() override;
  HttpLane(const HttpLane&) = delete;
  HttpLane& operator=(const HttpLane&) = delete;

  std::optional<std::size_t> submit(const DueRequest& request) override;
  void pump(std::int64_t wake_ns, Completions& done) override;
  void end_of_sends() noexcept override { sends_ended_ = true; }

 private:
  [[nodiscard]] bool idle() const noexcept;
  void finish(std::uint64_t id, std::int64_t done_ns, const Outcome& outcome);
  void fail(std::uint64_t id, std::size_t kind) { finish(id, now_ns(), Outcome{false, {}, kind}); }
  PipeConnection* least_loaded() noexcept;
  void dispatch();
  void fail_waiting_if_unreachable();
  void expire(std::int64_t now);
  void reconnect(std::int64_t now);
  void arm_timer(std::int64_t wake_ns, std::int64_t now);
  void wait_and_handle();
  void on_event(const epoll_event& event);
  void finish_connect(PipeConnection& c);
  void on_readable(PipeConnection& c);
  void take_responses(PipeConnection& c, std::int64_t done_ns);
  // Whether the close ended a response, which answered the front request.
  bool take_response_ended_by_close(PipeConnection& c, std::int64_t done_ns);
  void answer_front(PipeConnection& c, std::int64_t done_ns);
  void flush(PipeConnection& c);
  void set_wants_out(PipeConnection& c, bool wants_out);
  void watch(PipeConnection& c, std::size_t index);
  void close_connection(PipeConnection& c, std::size_t kind, std::int64_t retry_ns);
  void requeue_inflight(PipeConnection& c);

  HttpTarget target_;
  const std::int64_t deadline_ns_;
  bool sends_ended_ = false;
  bool unreachable_ = false;  // the latest connect attempt failed
  int epoll_ = -1, timer_ = -1;
  std::vector<PipeConnection> connections_;
  std::deque<Pending> waiting_;     // submitted, but no connection had room yet
  Completions* done_ = nullptr;     // during pump(): where finished requests go
  http::RequestEncoder encoder_;
  http::BodyDecoder decoder_;
  std::string input_;
};

HttpLane::HttpLane(const HttpTarget& target, std::vector<int> fds)
    : target_(target), deadline_ns_(http_client_deadline(target.options).count()),
      connections_(fds.size()),
      encoder_(target.url, target.options.http_timeout, target.options.http_api), decoder_(target.options.http_api) {
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_ < 0 || timer_ < 0) {
    for (const int fd : fds) ::close(fd);
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
  input_.reserve(target.inputs.max_bytes());
}

HttpLane::~HttpLane() {
  for (PipeConnection& c : connections_) c.close_socket();
  if (timer_ >= 0) ::close(timer_);
  if (epoll_ >= 0) ::close(epoll_);
}

std::optional<std::size_t> HttpLane::submit(const DueRequest& request) {
  // Written out by the next pump(), all of them with one write per connection.
  waiting_.push_back(Pending{request.id, request.intended_ns, 0, request.priority});
  return std::nullopt;
}

void HttpLane::pump(std::int64_t wake_ns, Completions& done) {
  done_ = &done;
  const std::int64_t now = now_ns();
  expire(now);
  reconnect(now);
  dispatch();
  // Nothing in flight and nothing to send later: nothing to wait for.
  if (!idle() || wake_ns != kNever) {
    arm_timer(wake_ns, now_ns());
    wait_and_handle();
  }
  done_ = nullptr;
}

bool HttpLane::idle() const noexcept {
  if (!waiting_.empty()) return false;
  for (const PipeConnection& c : connections_) {
    if (!c.inflight.empty()) return false;
  }
  return true;
}

void HttpLane::finish(std::uint64_t id, std::int64_t done_ns, const Outcome& outcome) {
  done_->finished(id, done_ns, outcome);
}

PipeConnection* HttpLane::least_loaded() noexcept {
  PipeConnection* best = nullptr;
  for (PipeConnection& c : connections_) {
    if (c.state != State::kOpen || c.inflight.size() >= target_.options.pipeline_depth) continue;
    if (best == nullptr || c.inflight.size() < best->inflight.size()) best = &c;
    if (best->inflight.empty()) break;  // cannot do better than an idle one
  }
  return best;
}

void HttpLane::dispatch() {
  while (!waiting_.empty()) {
    PipeConnection* c = least_loaded();
    if (c == nullptr) break;
    Pending p = waiting_.front();
    waiting_.pop_front();
    target_.inputs.build(p.id, input_);
    encoder_.append(c->out, input_, p.priority);
    p.sent_ns = now_ns();
    c->inflight.push_back(p);
  }
  // One write per connection for all it was given, not one per request.
  for (PipeConnection& c : connections_) {
    if (c.state == State::kOpen && c.writes_pending() && !c.wants_out) flush(c);
  }
  fail_waiting_if_unreachable();
}

void HttpLane::fail_waiting_if_unreachable() {
  // With no connection up or coming up and the server refusing new ones, waiting would only
  // turn "the server is gone" into timeouts: say what it is at once, as the shared-memory
  // client does.
  if (waiting_.empty() || !unreachable_) return;
  for (const PipeConnection& c : connections_) {
    if (c.state != State::kClosed) return;
  }
  for (const Pending& p : waiting_) fail(p.id, error_kind(ErrorCode::kDaemonUnavailable));
  waiting_.clear();
}

void HttpLane::expire(std::int64_t now) {
  while (!waiting_.empty() && now - waiting_.front().intended_ns > deadline_ns_) {
    fail(waiting_.front().id, error_kind(ErrorCode::kTimeout));
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

void HttpLane::reconnect(std::int64_t now) {
  if (sends_ended_ && waiting_.empty()) return;
  for (std::size_t i = 0; i < connections_.size(); ++i) {
    PipeConnection& c = connections_[i];
    if (c.state != State::kClosed || c.retry_ns > now) continue;
    c.retry_ns = now + kReconnectNs;
    const Expected<int> fd = http::start_connect(target_.endpoint);
    if (!fd) {
      http::warn_once(fd.error().message);
      unreachable_ = true;
      continue;
    }
    c.fd = *fd;
    c.state = State::kConnecting;
    watch(c, i);
  }
}

void HttpLane::arm_timer(std::int64_t wake_ns, std::int64_t now) {
  std::int64_t wake = wake_ns;
  if (!idle()) wake = std::min(wake, now + kHousekeepingNs);
  itimerspec spec{};
  // Zero would disarm the timer: a wake time already past is clamped to 1 ns, which fires at once.
  wake = std::max<std::int64_t>(wake, 1);
  spec.it_value.tv_sec = wake / 1'000'000'000;
  spec.it_value.tv_nsec = wake % 1'000'000'000;
  ::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void HttpLane::wait_and_handle() {
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

void HttpLane::on_event(const epoll_event& event) {
  PipeConnection& c = connections_[event.data.u64];
  if (c.state == State::kConnecting) {
    if ((event.events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0) finish_connect(c);
    return;
  }
  if (c.state != State::kOpen) return;  // closed by an earlier event of this batch
  if ((event.events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) on_readable(c);
  if (c.state == State::kOpen && (event.events & EPOLLOUT) != 0) flush(c);
}

void HttpLane::finish_connect(PipeConnection& c) {
  if (const auto connected = http::connect_result(c.fd, target_.endpoint); !connected) {
    http::warn_once(connected.error().message);
    close_connection(c, error_kind(ErrorCode::kDaemonUnavailable), now_ns() + kReconnectNs);
    unreachable_ = true;
    return;
  }
  unreachable_ = false;
  c.state = State::kOpen;
  set_wants_out(c, false);
}

void HttpLane::on_readable(PipeConnection& c) {
  const IoStatus status = c.fill();
  const int fill_errno = errno;
  // One time stamp for everything this read brought, taken before any answer is checked, so
  // the reference hashing is not charged to the server.
  const std::int64_t done_ns = now_ns();
  take_responses(c, done_ns);
  if (c.state != State::kOpen || status == IoStatus::kOk) return;
  if (status == IoStatus::kError) {
    http::warn_once(fmt::format("receive from {}: {}", target_.endpoint.text, std::strerror(fill_errno)));
  } else if (take_response_ended_by_close(c, done_ns)) {
    // Its response said the connection closes after it, so the server never took the requests
    // behind it: they go out again.
    requeue_inflight(c);
    close_connection(c, 0, now_ns());
    return;
  } else if (!c.inflight.empty()) {
    http::warn_once(fmt::format("{} closed a connection with requests outstanding", target_.endpoint.text));
  }
  // An idle connection the server closed is simply reopened; a broken one after a pause.
  const bool idle_close = status == IoStatus::kClosed && c.inflight.empty();
  close_connection(c, error_kind(ErrorCode::kDaemonUnavailable),
                   now_ns() + (idle_close ? 0 : kReconnectNs));
}

void HttpLane::take_responses(PipeConnection& c, std::int64_t done_ns) {
  std::size_t taken = 0;
  for (;;) {
    std::size_t used = 0;
    const Step step = c.reader.read(std::string_view(c.in).substr(taken), used);
    taken += used;
    if (step == Step::kNeedMore) break;
    const bool unasked = step == Step::kDone && c.reader.status() >= 200 && c.inflight.empty();
    if (step == Step::kBad || unasked) {
      const std::string_view why = unasked ? "a response to no request" : c.reader.problem();
      http::warn_once(fmt::format("bad response from {}: {}", target_.endpoint.text, why));
      close_connection(c, error_kind(ErrorCode::kProtocolError), now_ns());  // it is up: at once
      return;
    }
    if (c.reader.status() < 200) continue;  // 1xx: informational, answers nothing
    answer_front(c, done_ns);
    if (!c.reader.keep_alive()) {
      requeue_inflight(c);
      close_connection(c, 0, now_ns());  // a polite close: reconnect at once
      return;
    }
  }
  c.in.erase(0, taken);
}

bool HttpLane::take_response_ended_by_close(PipeConnection& c, std::int64_t done_ns) {
  // A response without Content-Length or chunks (HTTP/1.0 style) ends where the connection does.
  if (c.inflight.empty() || c.reader.read_eof() != Step::kDone || c.reader.status() < 200) return false;
  answer_front(c, done_ns);
  return true;
}

void HttpLane::answer_front(PipeConnection& c, std::int64_t done_ns) {
  const Pending p = c.inflight.front();
  c.inflight.pop_front();
  finish(p.id, done_ns, decoder_.decode(c.reader.status(), c.reader.body()));
}

void HttpLane::flush(PipeConnection& c) {
  if (c.flush() == IoStatus::kError) {
    http::warn_once(fmt::format("send to {}: {}", target_.endpoint.text, std::strerror(errno)));
    close_connection(c, error_kind(ErrorCode::kDaemonUnavailable), now_ns() + kReconnectNs);
    return;
  }
  set_wants_out(c, c.writes_pending());
}

void HttpLane::set_wants_out(PipeConnection& c, bool wants_out) {
  if (c.wants_out == wants_out) return;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (wants_out ? EPOLLOUT : 0U);
  event.data.u64 = static_cast<std::uint64_t>(&c - connections_.data());
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &event);
  c.wants_out = wants_out;
}

void HttpLane::watch(PipeConnection& c, std::size_t index) {
  // A connecting socket reports the end of its connect as writable.
  c.wants_out = c.state == State::kConnecting;
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | (c.wants_out ? EPOLLOUT : 0U);
  event.data.u64 = index;
  ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &event);
}

void HttpLane::close_connection(PipeConnection& c, std::size_t kind, std::int64_t retry_ns) {
  for (const Pending& p : c.inflight) fail(p.id, kind);
  c.inflight.clear();
  c.close_socket();
  c.retry_ns = retry_ns;
}

void HttpLane::requeue_inflight(PipeConnection& c) {
  // The server said it closes after the response just read, so it never took the requests
  // behind it: they go out again, in order, ahead of newer ones, their intended times unchanged.
  while (!c.inflight.empty()) {
    waiting_.push_front(c.inflight.back());
    c.inflight.pop_back();
  }
}

}  // namespace

std::unique_ptr<OpenLane> make_http_lane(const HttpTarget& target, std::vector<int> fds) {
  return std::make_unique<HttpLane>(target, std::move(fds));
}

}  // namespace batchd::stress

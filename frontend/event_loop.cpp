// The loop itself: ring set-up, the completion dispatch, the timer and the shutdown sequence.
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <ctime>
#include <system_error>

#include "frontend/loop_internal.hpp"

namespace batchd::http {

namespace {

constexpr unsigned kSubmissionEntries = 4096;
constexpr unsigned kCompletionEntries = 4 * kSubmissionEntries;  // multishot ops post many each

ClientOptions client_options(const FrontendOptions& options) {
  ClientOptions out;
  out.socket_path = options.socket_path;
  // The connector thread's attempt; short, so a stop never waits long for it.
  out.connect_timeout = std::chrono::milliseconds(500);
  return out;
}

int init_ring(io_uring& ring, bool single_issuer) {
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = kCompletionEntries;
  if (single_issuer) {
    // Only this thread submits; completions then run in our io_uring_enter, without interrupts.
    params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  }
  return io_uring_queue_init_params(kSubmissionEntries, &ring, &params);
}

}  // namespace

EventLoop::EventLoop(const LoopContext& context)
    : context_(context), options_(*context.options), metrics_(context.metrics->worker(context.index)),
      link_(client_options(*context.options), context.wake_fd), jobs_(*context.jobs) {
  limits_.max_header_bytes = options_.max_header_bytes;
  limits_.max_body_bytes = options_.max_body_bytes;
  limits_.max_pending = options_.max_pipelined;
  int rc = init_ring(ring_, context.features->single_issuer);
  if (rc < 0 && context.features->single_issuer) rc = init_ring(ring_, false);
  if (rc < 0) {
    if (context_.listen_fd >= 0) ::close(context_.listen_fd);
    throw std::system_error(-rc, std::generic_category(), "io_uring_queue_init");
  }
  ring_ready_ = true;
  const bool basic = options_.io_mode == IoMode::kBasic;
  multishot_accept_ = !basic && context.features->multishot_accept;
  daemon_event_by_poll_ = basic;  // the oldest kernels' way to wait on the client's eventfd
  if (!basic && context.features->multishot_recv) {
    // Without buffer rings the loop falls back to one receive per readable connection.
    multishot_recv_ = bool(buffers_.init(ring_, kBufferGroup, kRingBuffers, kRingBufferBytes));
  }
  ApiLimits api_limits;
  api_limits.default_timeout = std::chrono::milliseconds(options_.default_timeout_ms);
  api_limits.max_timeout = std::chrono::milliseconds(options_.max_timeout_ms);
  api_limits.max_body_bytes = options_.max_body_bytes;
  api_ = std::make_unique<Api>(api_limits, static_cast<ApiContext&>(*this));
  jobs_api_ = std::make_unique<JobsApi>(api_limits, jobs_.options().max_inputs, jobs_.options().max_deadline,
                                        static_cast<ApiContext&>(*this));
  v2_api_ = std::make_unique<V2Api>(V2Limits{api_limits, options_.max_infer_strings, context.model_control != nullptr},
                                    static_cast<ApiContext&>(*this),
                                    context.tracer != nullptr ? &context.tracer->settings() : nullptr);
  now_ns_ = shm::monotonic_ns();
  last_sweep_ns_ = now_ns_;
  date_second_ = static_cast<std::int64_t>(::time(nullptr));
  date_ = http_date(date_second_);
}

EventLoop::~EventLoop() {
  // The ring goes first: the kernel then holds no pointer into connections or buffers.
  if (ring_ready_) io_uring_queue_exit(&ring_);
  for (auto& conn : conns_) {
    if (conn) {
      ::close(conn->fd);
      context_.metrics->connection_closed();
    }
  }
  if (context_.listen_fd >= 0) ::close(context_.listen_fd);
}

void EventLoop::run() {
  spdlog::debug("batchd-http: worker {} running ({} accept, {} receive)", context_.index,
                multishot_accept_ ? "multishot" : "single-shot",
                multishot_recv_ ? "multishot with a buffer ring" : "plain");
  arm_accept();
  post_wake_read();
  arm_timer();
  while (!finished()) {
    const int rc = io_uring_submit_and_wait(&ring_, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      throw std::system_error(-rc, std::generic_category(), "io_uring_submit_and_wait");
    }
    now_ns_ = shm::monotonic_ns();
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      handle(cqe->user_data, cqe->res, cqe->flags);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    service_dirty();
  }
  spdlog::debug("batchd-http: worker {} finished", context_.index);
}

io_uring_sqe* EventLoop::sqe() {
  io_uring_sqe* entry = io_uring_get_sqe(&ring_);
  while (entry == nullptr) {  // the submission queue is full: hand it to the kernel and retry
    io_uring_submit(&ring_);
    entry = io_uring_get_sqe(&ring_);
  }
  return entry;
}

void EventLoop::handle(std::uint64_t user_data, int res, std::uint32_t flags) {
  const auto op = static_cast<Op>(user_data_op(user_data));
  switch (op) {
    case Op::kAccept: on_accept(res, flags); return;
    case Op::kTimer: on_timer(); return;
    case Op::kWake: on_wake(); return;
    case Op::kDaemonEvent: on_daemon_event(res); return;
    case Op::kCancel: return;
    case Op::kRecv:
    case Op::kSend: break;
  }
  Conn* conn = lookup(user_data_index(user_data), user_data_generation(user_data));
  if (conn == nullptr) {
    // Cannot happen (a slot is freed only once nothing of it is in the ring), but a provided
    // buffer must never leak.
    if ((flags & IORING_CQE_F_BUFFER) != 0) buffers_.recycle(flags >> IORING_CQE_BUFFER_SHIFT);
    return;
  }
  if (op == Op::kRecv) {
    on_recv(*conn, res, flags);
  } else {
    on_send(*conn, res);
  }
}

void EventLoop::arm_accept() {
  if (context_.listen_fd < 0 || accept_armed_ || stopping_) return;
  io_uring_sqe* entry = sqe();
  if (multishot_accept_) {
    io_uring_prep_multishot_accept(entry, context_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  } else {
    io_uring_prep_accept(entry, context_.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kAccept), 0, 0));
  accept_armed_ = true;
}

void EventLoop::arm_timer() {
  const std::int64_t tick_ns = answers_owed_ > 0 ? kFastTickNs : kSlowTickNs;
  timer_ts_.tv_sec = 0;
  timer_ts_.tv_nsec = tick_ns;
  io_uring_sqe* entry = sqe();
  io_uring_prep_timeout(entry, &timer_ts_, 0, 0);
  io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kTimer), 0, 0));
  timer_armed_ = true;
}

void EventLoop::post_wake_read() {
  io_uring_sqe* entry = sqe();
  io_uring_prep_read(entry, context_.wake_fd, &wake_value_, sizeof(wake_value_), 0);
  io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kWake), 0, 0));
}

void EventLoop::on_timer() {
  timer_armed_ = false;
  Client* client = link_.client();
  if (client != nullptr && (answers_owed_ > 0 || !client->connected())) poll_daemon();
  if (now_ns_ - last_sweep_ns_ >= kSweepNs) sweep();
  if (accept_paused_) {
    accept_paused_ = false;
    arm_accept();
  }
  arm_timer();
}

void EventLoop::on_wake() {
  post_wake_read();
  take_jobs_mail();
  if (link_.adopt()) {
    metrics_.set_attached(true);
    post_daemon_event();
  }
  if (context_.stop_requested->load(std::memory_order_acquire) && !stopping_) begin_stopping();
}

void EventLoop::sweep() {
  last_sweep_ns_ = now_ns_;
  const auto second = static_cast<std::int64_t>(::time(nullptr));
  if (second != date_second_) {
    date_second_ = second;
    date_ = http_date(second);
  }
  const bool drain_over = stopping_ && now_ns_ >= drain_deadline_ns_;
  for (auto& conn : conns_) {
    if (!conn) continue;
    if (drain_over) {
      abort(*conn);
    } else {
      check_timeouts(*conn);
    }
  }
}

void EventLoop::begin_stopping() {
  stopping_ = true;
  const std::int64_t drain_ms =
      options_.drain_timeout_ms > 0 ? options_.drain_timeout_ms : options_.max_timeout_ms + 1000;
  drain_deadline_ns_ = now_ns_ + drain_ms * 1'000'000;
  if (accept_armed_) {
    io_uring_sqe* entry = sqe();
    io_uring_prep_cancel64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kAccept), 0, 0), 0);
    io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kCancel), 0, 0));
  } else if (context_.listen_fd >= 0) {
    ::close(context_.listen_fd);
    context_.listen_fd = -1;
  }
  for (auto& conn : conns_) {
    if (!conn || conn->state != Conn::State::kOpen) continue;
    conn->http.finish(std::nullopt);  // answers already owed are still sent
    mark_dirty(*conn);
  }
  spdlog::info("batchd-http: worker {} stopping: {} connections, {} answers owed", context_.index,
               live_connections_, answers_owed_);
}

bool EventLoop::finished() const noexcept {
  // Queued jobs are the jobs consumer's: it drains them after the loops (main.cpp).
  return stopping_ && context_.listen_fd < 0 && live_connections_ == 0;
}

}  // namespace batchd::http

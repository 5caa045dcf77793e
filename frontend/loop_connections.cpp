// The event loop's connections: accept, receive, send, timeouts and the two ways to close (a
// graceful one that lingers so the last answer is not lost to a reset, and an abort).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "frontend/loop_internal.hpp"

namespace batchd::http {

namespace {

// Refuses a connection with an answer it may or may not read; never blocks.
void refuse(int fd, unsigned status, std::string_view code, std::string_view message) {
  std::string bytes;
  serialize(error_response(status, code, message, 1), Framing{false, true, {}}, bytes);
  [[maybe_unused]] const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::close(fd);
}

}  // namespace

EventLoop::Conn* EventLoop::lookup(std::uint32_t index, std::uint32_t generation) noexcept {
  if (index >= conns_.size() || !conns_[index]) return nullptr;
  Conn* conn = conns_[index].get();
  return conn->generation == (generation & 0xFFFFFFU) ? conn : nullptr;
}

void EventLoop::mark_dirty(Conn& conn) {
  if (conn.dirty) return;
  conn.dirty = true;
  dirty_.push_back(conn.index);
}

void EventLoop::on_accept(int res, std::uint32_t flags) {
  if ((flags & IORING_CQE_F_MORE) == 0) accept_armed_ = false;
  if (res >= 0) {
    adopt_connection(res);
  } else if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS || res == -ENOMEM) {
    spdlog::warn("batchd-http: accept: {}; retrying shortly", std::strerror(-res));
    accept_paused_ = true;  // at once would spin: the next tick tries again
  } else if (res != -ECANCELED && res != -EINTR && res != -EAGAIN && res != -ECONNABORTED) {
    spdlog::warn("batchd-http: accept: {}", std::strerror(-res));
  }
  if (accept_armed_) return;
  if (stopping_) {
    if (context_.listen_fd >= 0) ::close(context_.listen_fd);
    context_.listen_fd = -1;
  } else if (!accept_paused_) {
    arm_accept();
  }
}

void EventLoop::adopt_connection(int fd) {
  if (stopping_) {
    refuse(fd, 503, "shutting_down", "the server is shutting down; retry on another instance");
    metrics_.connection_rejected();
    return;
  }
  if (!context_.metrics->try_open_connection(options_.max_connections)) {
    refuse(fd, oip::overload_http_status(options_.overload_status), "too_many_connections", "the server has too many open connections; retry later");
    metrics_.connection_rejected();
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // answers are small and latency-bound
  std::uint32_t index = 0;
  if (free_slots_.empty()) {
    index = static_cast<std::uint32_t>(conns_.size());
    conns_.emplace_back();
    generations_.push_back(0);
  } else {
    index = free_slots_.back();
    free_slots_.pop_back();
  }
  auto conn = std::make_unique<Conn>(limits_, date_);
  conn->fd = fd;
  conn->index = index;
  conn->generation = generations_[index] & 0xFFFFFFU;
  conn->last_activity_ns = now_ns_;
  conn->trusted_proxy = from_trusted_proxy(fd);
  if (!multishot_recv_) conn->basic_buffer = std::make_unique<char[]>(kBasicBufferBytes);
  conns_[index] = std::move(conn);
  ++live_connections_;
  metrics_.connection_accepted();
  mark_dirty(*conns_[index]);
}

// Asked once per connection, and only when --trusted-proxy names any network.
bool EventLoop::from_trusted_proxy(int fd) const {
  const grants::GrantPolicy& policy = *context_.grants;
  if (!policy.has_trusted_proxies()) return false;
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return false;
  const std::optional<grants::IpAddress> address = grants::ip_of(peer);
  return address && policy.trusts(*address);
}

void EventLoop::on_recv(Conn& conn, int res, std::uint32_t flags) {
  if ((flags & IORING_CQE_F_MORE) == 0) {
    conn.recv_armed = false;
    conn.recv_cancel_sent = false;
  }
  const bool provided = (flags & IORING_CQE_F_BUFFER) != 0;
  const unsigned buffer_id = flags >> IORING_CQE_BUFFER_SHIFT;
  if (res > 0) {
    const std::string_view bytes = provided ? buffers_.view(buffer_id, static_cast<std::size_t>(res))
                                            : std::string_view(conn.basic_buffer.get(), static_cast<std::size_t>(res));
    conn.last_activity_ns = now_ns_;
    if (conn.state == Conn::State::kOpen) conn.http.append_input(bytes, now_ns_);  // else discarded
  } else if (res == 0) {
    conn.peer_eof = true;
    if (conn.state == Conn::State::kOpen) {
      conn.http.input_closed();
    } else {
      abort(conn);
    }
  } else if (res != -ENOBUFS && res != -ECANCELED && res != -EINTR && res != -EAGAIN) {
    conn.peer_eof = true;  // reset or similar: nothing more will come, nothing can be sent
    abort(conn);
  }
  // ENOBUFS (no provided buffer was free) ended the multishot receive; service() re-arms it.
  if (provided) buffers_.recycle(buffer_id);
  mark_dirty(conn);
}

void EventLoop::on_send(Conn& conn, int res) {
  conn.send_inflight = false;
  if (res > 0) {
    conn.http.sent(static_cast<std::size_t>(res));
    conn.last_activity_ns = now_ns_;
  } else if (res != -EINTR && res != -EAGAIN) {
    abort(conn);  // the peer is gone (EPIPE, ECONNRESET): its answers are dropped
  }
  mark_dirty(conn);
}

void EventLoop::service_dirty() {
  std::vector<std::uint32_t> batch;
  while (!dirty_.empty()) {
    batch.swap(dirty_);
    for (const std::uint32_t index : batch) {
      if (index < conns_.size() && conns_[index]) service(*conns_[index]);
    }
    batch.clear();
  }
}

void EventLoop::service(Conn& conn) {
  // Marks made while servicing are covered by the steps below, so the flag stays up until the end.
  if (conn.state == Conn::State::kOpen) {
    Dispatcher dispatcher(*this, conn);
    conn.http.pump(dispatcher, now_ns_);
  }
  if (conn.state != Conn::State::kClosing && !conn.send_inflight) start_send(conn);
  if (conn.state == Conn::State::kOpen && !conn.send_inflight && conn.http.done()) begin_close(conn);
  update_receive(conn);
  conn.dirty = false;
  if (conn.state == Conn::State::kClosing && !conn.recv_armed && !conn.send_inflight) release(conn);
}

void EventLoop::start_send(Conn& conn) {
  const std::string_view out = conn.http.begin_send();
  if (out.empty()) return;
  io_uring_sqe* entry = sqe();
  io_uring_prep_send(entry, conn.fd, out.data(), out.size(), MSG_NOSIGNAL);
  io_uring_sqe_set_data64(entry, conn.user_data(Op::kSend));
  conn.send_inflight = true;
  conn.send_started_ns = now_ns_;
}

void EventLoop::update_receive(Conn& conn) {
  if (conn.peer_eof || conn.state == Conn::State::kClosing) return;
  const bool wanted = conn.state == Conn::State::kLingering || conn.http.wants_input();
  if (wanted && !conn.recv_armed) {
    io_uring_sqe* entry = sqe();
    if (multishot_recv_) {
      io_uring_prep_recv_multishot(entry, conn.fd, nullptr, 0, 0);
      entry->flags |= IOSQE_BUFFER_SELECT;
      entry->buf_group = buffers_.group();
    } else {
      io_uring_prep_recv(entry, conn.fd, conn.basic_buffer.get(), kBasicBufferBytes, 0);
    }
    io_uring_sqe_set_data64(entry, conn.user_data(Op::kRecv));
    conn.recv_armed = true;
    conn.recv_cancel_sent = false;
  } else if (!wanted && conn.recv_armed && multishot_recv_ && !conn.recv_cancel_sent) {
    // Paused (too many answers owed): stop the multishot receive so the kernel's socket buffer,
    // not our memory, holds what the peer sends next.
    io_uring_sqe* entry = sqe();
    io_uring_prep_cancel64(entry, conn.user_data(Op::kRecv), 0);
    io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kCancel), 0, 0));
    conn.recv_cancel_sent = true;
  }
}

void EventLoop::begin_close(Conn& conn) {
  if (conn.peer_eof) {
    abort(conn);
    return;
  }
  // Closing with unread input would send a reset that can destroy our last answer in flight, so
  // only the sending side closes now; the rest follows on the peer's EOF or after the linger time.
  ::shutdown(conn.fd, SHUT_WR);
  conn.state = Conn::State::kLingering;
  conn.linger_deadline_ns = now_ns_ + kLingerNs;
}

void EventLoop::abort(Conn& conn) {
  if (conn.state == Conn::State::kClosing) return;
  conn.state = Conn::State::kClosing;
  withdraw_owed(conn);
  ::shutdown(conn.fd, SHUT_RDWR);  // completes a receive or send still in the ring
  if (conn.recv_armed && !conn.recv_cancel_sent) {
    io_uring_sqe* entry = sqe();
    io_uring_prep_cancel64(entry, conn.user_data(Op::kRecv), 0);
    io_uring_sqe_set_data64(entry, pack_user_data(static_cast<std::uint8_t>(Op::kCancel), 0, 0));
    conn.recv_cancel_sent = true;
  }
  mark_dirty(conn);
}

void EventLoop::release(Conn& conn) {
  withdraw_owed(conn);
  const std::uint32_t index = conn.index;
  ::close(conn.fd);
  context_.metrics->connection_closed();
  --live_connections_;
  ++generations_[index];
  free_slots_.push_back(index);
  conns_[index].reset();  // `conn` is gone from here on
}

void EventLoop::check_timeouts(Conn& conn) {
  const std::int64_t idle_ns = options_.idle_timeout_ms * 1'000'000;
  if (conn.state == Conn::State::kLingering && now_ns_ >= conn.linger_deadline_ns) abort(conn);
  if (conn.state != Conn::State::kOpen) return;
  if (conn.send_inflight && now_ns_ - conn.send_started_ns > idle_ns) {
    abort(conn);  // the peer stopped reading its answers
    return;
  }
  if (!conn.http.blocked_on_us()) {
    const HttpConnection::Phase phase = conn.http.phase();
    const std::int64_t elapsed_ns = now_ns_ - conn.http.request_started_ns();
    const bool header_late = phase == HttpConnection::Phase::kHeader &&
                             elapsed_ns > options_.header_timeout_ms * 1'000'000;
    const bool body_late = phase == HttpConnection::Phase::kBody &&
                           elapsed_ns > options_.body_timeout_ms * 1'000'000;
    if (header_late || body_late) {
      const Response late = error_response(
          408, "request_timeout",
          header_late ? "the request's header did not arrive in time" : "the request's body did not arrive in time");
      metrics_.record_response(late.status, elapsed_ns);
      conn.http.finish(late);
      mark_dirty(conn);
      return;
    }
  }
  if (conn.http.quiet() && !conn.send_inflight && now_ns_ - conn.last_activity_ns > idle_ns) {
    conn.http.finish(std::nullopt);
    mark_dirty(conn);
  }
}

}  // namespace batchd::http

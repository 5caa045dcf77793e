#include "tools/stress_http_conn.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "client_lib/client.hpp"
#include "tools/stress_clock.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress::http {

namespace {

constexpr std::int64_t kReconnectNs = 100'000'000;
// Distinct problems worth printing; past this a broken server has made its point.
constexpr std::size_t kMaxWarnings = 16;

enum class Wait { kReady, kTimeout, kError };

Wait wait_for(int fd, short events, std::int64_t deadline_ns) {
  for (;;) {
    const std::int64_t left_ns = deadline_ns - now_ns();
    if (left_ns <= 0) return Wait::kTimeout;
    pollfd p{fd, events, 0};
    // Rounded up, so a wait never ends just before the deadline and spins.
    const auto ms = std::min<std::int64_t>((left_ns + 999'999) / 1'000'000, 1 << 30);
    const int n = ::poll(&p, 1, static_cast<int>(ms));
    if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0 ? Wait::kReady : Wait::kError;
    if (n < 0 && errno != EINTR) return Wait::kError;
  }
}

Failure cannot_connect(const Endpoint& endpoint, int err) {
  return errno_failure(fmt::format("cannot connect to {}", endpoint.text), err);
}

Failure timed_out(const Endpoint& endpoint, std::string_view why) {
  return make_failure(std::errc::timed_out,
                      fmt::format("cannot connect to {}: {}", endpoint.text, why));
}

Exchange failure(std::size_t kind) {
  Exchange ex;
  ex.error_kind = kind;
  return ex;
}

}  // namespace

void warn_once(std::string_view problem) {
  static std::mutex mu;
  static std::vector<std::string> seen;
  static const bool tty = ::isatty(STDERR_FILENO) == 1;
  std::lock_guard lock(mu);
  if (seen.size() >= kMaxWarnings || std::find(seen.begin(), seen.end(), problem) != seen.end()) {
    return;
  }
  seen.emplace_back(problem);
  // On a terminal, first erase the progress line this would otherwise be glued to.
  fmt::print(stderr, "{}batchd-stress: {}\n", tty ? "\r\x1b[K" : "", problem);
}

Expected<Endpoint> resolve(const Url& url) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found); rc != 0) {
    return make_failure(std::errc::host_unreachable,
                        fmt::format("cannot resolve {}: {}", url.host, ::gai_strerror(rc)));
  }
  Endpoint endpoint;
  std::memcpy(&endpoint.address, found->ai_addr, found->ai_addrlen);
  endpoint.length = found->ai_addrlen;
  endpoint.text = url.host_header;
  ::freeaddrinfo(found);
  return endpoint;
}

Expected<int> start_connect(const Endpoint& endpoint) {
  const int fd = ::socket(endpoint.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          IPPROTO_TCP);
  if (fd < 0) return cannot_connect(endpoint, errno);
  // Requests are written whole; Nagle would only hold back the tail of a pipelined batch.
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&endpoint.address), endpoint.length) == 0 ||
      errno == EINPROGRESS) {
    return fd;
  }
  const int err = errno;
  ::close(fd);
  return cannot_connect(endpoint, err);
}

Expected<void> connect_result(int fd, const Endpoint& endpoint) {
  int error = 0;
  socklen_t length = sizeof(error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) return cannot_connect(endpoint, error);
  return {};
}

Expected<std::vector<int>> connect_all(const Endpoint& endpoint, unsigned n,
                                       std::chrono::milliseconds timeout) {
  std::vector<int> fds;
  Expected<void> connected;
  for (unsigned i = 0; i < n && connected; ++i) {
    const Expected<int> fd = start_connect(endpoint);
    if (!fd) {
      connected = fd.error();
      break;
    }
    fds.push_back(*fd);
    const Wait w = wait_for(*fd, POLLOUT, now_ns() + timeout.count() * 1'000'000);
    connected =
        w == Wait::kTimeout ? timed_out(endpoint, "timed out") : connect_result(*fd, endpoint);
  }
  if (connected) return fds;
  for (const int fd : fds) ::close(fd);
  return connected.error();
}

void SyncConnection::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  in_.clear();
  reader_.reset();
}

bool SyncConnection::ensure_connected(std::int64_t deadline_ns) {
  if (fd_ >= 0) return true;
  if (now_ns() < retry_ns_) sleep_until_ns(std::min(retry_ns_, deadline_ns));
  const Expected<int> fd = start_connect(*endpoint_);
  Expected<void> connected = fd ? Expected<void>() : fd.error();
  if (fd) {
    fd_ = *fd;
    connected = wait_for(fd_, POLLOUT, deadline_ns) != Wait::kReady
                    ? timed_out(*endpoint_, "no connection before the request's deadline")
                    : connect_result(fd_, *endpoint_);
  }
  if (connected) return true;
  warn_once(connected.error().message);
  close_fd();
  retry_ns_ = now_ns() + kReconnectNs;
  return false;
}

bool SyncConnection::send_all(std::string_view request, std::int64_t deadline_ns) {
  while (!request.empty()) {
    const ssize_t n = ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL);
    if (n > 0) {
      request.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      if (wait_for(fd_, POLLOUT, deadline_ns) != Wait::kReady) return false;
    } else if (n < 0 && errno != EINTR) {
      warn_once(fmt::format("send to {}: {}", endpoint_->text, std::strerror(errno)));
      return false;
    }
  }
  return true;
}

SyncConnection::Received SyncConnection::read_some() {
  const std::size_t had = in_.size();
  in_.resize(had + kReadChunk);
  const ssize_t n = ::recv(fd_, in_.data() + had, kReadChunk, 0);
  in_.resize(had + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return Received::kData;
  if (n == 0) return Received::kEof;
  warn_once(fmt::format("receive from {}: {}", endpoint_->text, std::strerror(errno)));
  return Received::kError;
}

Exchange SyncConnection::responded() {
  Exchange ex;
  ex.responded = true;
  ex.status = reader_.status();
  ex.body = reader_.body();
  return ex;
}

Exchange SyncConnection::read_response(std::int64_t deadline_ns) {
  using Step = ResponseReader::Step;
  for (;;) {
    std::size_t used = 0;
    const Step step = reader_.read(in_, used);
    in_.erase(0, used);
    if (step == Step::kBad) {
      warn_once(fmt::format("bad response from {}: {}", endpoint_->text, reader_.problem()));
      close_fd();
      return failure(error_kind(ErrorCode::kProtocolError));
    }
    if (step == Step::kDone && reader_.status() < 200) continue;  // 1xx: informational, skip it
    if (step == Step::kDone) {
      if (!in_.empty()) warn_once("the server sent more than one response per request");
      close_after_last_ = !reader_.keep_alive() || !in_.empty();
      return responded();
    }
    const Wait w = wait_for(fd_, POLLIN, deadline_ns);
    // A late answer would be taken for the next request's: only a fresh connection is safe.
    if (w != Wait::kReady) close_fd();
    if (w == Wait::kTimeout) return failure(error_kind(ErrorCode::kTimeout));
    if (w == Wait::kError) return failure(error_kind(ErrorCode::kDaemonUnavailable));
    const Received received = read_some();
    if (received == Received::kData) continue;
    // A response without Content-Length or chunks (HTTP/1.0 style) ends where the connection does.
    if (received == Received::kEof && in_.empty() && reader_.read_eof() == Step::kDone &&
        reader_.status() >= 200) {
      close_after_last_ = true;  // closed: the body stays readable until the next exchange
      return responded();
    }
    close_fd();
    return failure(error_kind(ErrorCode::kDaemonUnavailable));
  }
}

Exchange SyncConnection::exchange(std::string_view request, std::int64_t deadline_ns) {
  if (std::exchange(close_after_last_, false)) close_fd();
  if (!ensure_connected(deadline_ns)) return failure(error_kind(ErrorCode::kDaemonUnavailable));
  if (!send_all(request, deadline_ns)) {
    const bool timed_out = now_ns() >= deadline_ns;
    close_fd();
    return failure(error_kind(timed_out ? ErrorCode::kTimeout : ErrorCode::kDaemonUnavailable));
  }
  return read_response(deadline_ns);
}

}  // namespace batchd::stress::http

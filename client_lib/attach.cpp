#include "client_lib/attach.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "shm/futex.hpp"

namespace batchd {
namespace {

constexpr auto kConnectRetry = std::chrono::milliseconds(10);

const char* refusal_reason(shm::AttachStatus status) noexcept {
  switch (status) {
    case shm::AttachStatus::kOk: return "ok";
    case shm::AttachStatus::kBadHello: return "the daemon did not understand the attach request";
    case shm::AttachStatus::kVersionMismatch: return "client and daemon protocol versions differ";
    case shm::AttachStatus::kPermissionDenied: return "this user may not use the daemon";
    case shm::AttachStatus::kTooManyClients: return "the daemon serves its maximum of clients";
    case shm::AttachStatus::kShuttingDown: return "the daemon is shutting down";
    case shm::AttachStatus::kInternalError: return "the daemon could not set up a segment";
  }
  return "unknown refusal";
}

// Connects, retrying while the socket is missing or refuses; returns -errno of the last try.
int connect_until(const std::string& path, std::int64_t deadline_ns, shm::UniqueFd& out) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (;;) {
    shm::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return -errno;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      out = std::move(fd);
      return 0;
    }
    const int err = errno;
    if (err != ENOENT && err != ECONNREFUSED && err != EAGAIN && err != EINTR) return -err;
    if (shm::monotonic_ns() + kConnectRetry.count() * 1'000'000 > deadline_ns) return -err;
    std::this_thread::sleep_for(kConnectRetry);
  }
}

}  // namespace

std::string client_default_socket_path() {
  if (const char* env = std::getenv("BATCHD_SOCKET"); env != nullptr && *env != '\0') return env;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (::geteuid() == 0 || runtime == nullptr || *runtime == '\0') return "/run/batchd/batchd.sock";
  return std::string(runtime) + "/batchd/batchd.sock";
}

bool attach_to_daemon(const std::string& socket_path, std::chrono::milliseconds timeout,
                      int event_fd, Attachment& out, Error& error) {
  const std::int64_t deadline_ns = shm::monotonic_ns() + timeout.count() * 1'000'000;
  shm::UniqueFd conn;
  if (int rc = connect_until(socket_path, deadline_ns, conn); rc != 0) {
    error = {ErrorCode::kDaemonUnavailable,
             fmt::format("no batchd daemon at {} ({}); is it running?", socket_path,
                         std::strerror(-rc))};
    return false;
  }
  shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion,
                   event_fd >= 0 ? shm::kHelloWantsEventfd : 0U, 0};
  std::vector<int> send_fds;
  if (event_fd >= 0) send_fds.push_back(event_fd);
  if (int err = shm::send_with_fds(conn.get(), std::as_bytes(std::span(&hello, 1)), send_fds);
      err != 0) {
    error = {ErrorCode::kDaemonUnavailable,
             fmt::format("daemon at {} dropped the connection: {}", socket_path, std::strerror(err))};
    return false;
  }
  pollfd pfd{conn.get(), POLLIN, 0};
  const std::int64_t left_ms = std::max<std::int64_t>(0, (deadline_ns - shm::monotonic_ns()) / 1'000'000);
  if (::poll(&pfd, 1, static_cast<int>(left_ms)) <= 0) {
    error = {ErrorCode::kDaemonUnavailable,
             fmt::format("daemon at {} did not answer the attach request within {} ms", socket_path,
                         timeout.count())};
    return false;
  }
  shm::AttachReply reply{};
  std::vector<shm::UniqueFd> fds;
  const long n = shm::recv_with_fds(conn.get(), std::as_writable_bytes(std::span(&reply, 1)), fds);
  if (n != static_cast<long>(sizeof(reply)) || reply.magic != shm::kAttachMagic) {
    error = {ErrorCode::kDaemonUnavailable,
             fmt::format("daemon at {} closed or sent a malformed attach reply", socket_path)};
    return false;
  }
  if (reply.status != shm::AttachStatus::kOk) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    error = {ErrorCode::kDaemonUnavailable,
             fmt::format("daemon at {} refused to attach: {} ({})", socket_path,
                         refusal_reason(reply.status), reply.message)};
    return false;
  }
  if (fds.size() != shm::kAttachFdCount) {
    error = {ErrorCode::kProtocolError,
             fmt::format("daemon sent {} fds with its attach reply, expected {}", fds.size(),
                         static_cast<int>(shm::kAttachFdCount))};
    return false;
  }
  out.connection = std::move(conn);
  out.fds = std::move(fds);
  out.client_id = reply.client_id;
  return true;
}

}  // namespace batchd

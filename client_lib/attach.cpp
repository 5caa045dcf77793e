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

#include "client_lib/client_segment.hpp"
#include "shm/futex.hpp"

namespace batchd {
namespace {

constexpr auto kConnectRetry = std::chrono::milliseconds(10);
// A refusal as busy (shm::AttachStatus::kBusy) is retried after this, within the deadline.
constexpr auto kBusyRetry = std::chrono::milliseconds(10);

// The typed error a refusal means, and a reason for a person.
Error refusal_error(shm::AttachStatus status, const std::string& socket_path, const char* message) {
  ErrorCode code = ErrorCode::kDaemonUnavailable;
  const char* reason = "unknown refusal";
  switch (status) {
    case shm::AttachStatus::kOk: reason = "ok"; break;
    case shm::AttachStatus::kBadHello:
      code = ErrorCode::kProtocolError;
      reason = "the daemon did not understand the attach request";
      break;
    case shm::AttachStatus::kVersionMismatch:
      code = ErrorCode::kProtocolError;
      reason = "client and daemon protocol versions differ";
      break;
    case shm::AttachStatus::kPermissionDenied:
      code = ErrorCode::kPermissionDenied;
      reason = "this user may not use the daemon";
      break;
    case shm::AttachStatus::kTooManyClients:
      code = ErrorCode::kTooManyClients;
      reason = "the daemon serves its maximum of clients";
      break;
    case shm::AttachStatus::kTooManyClientsForUser:
      code = ErrorCode::kTooManyClients;
      reason = "this user has its maximum of clients attached";
      break;
    case shm::AttachStatus::kShuttingDown: reason = "the daemon is shutting down"; break;
    case shm::AttachStatus::kInternalError: reason = "the daemon could not set up a segment"; break;
    case shm::AttachStatus::kAttachTimeout: reason = "the attach request came too late"; break;
    case shm::AttachStatus::kBusy:
      code = ErrorCode::kOverloaded;
      reason = "this user starts attaching faster than the daemon allows";
      break;
    case shm::AttachStatus::kUnknownModel:
      code = ErrorCode::kUnknownModel;
      reason = "no model of that name";
      break;
    case shm::AttachStatus::kModelChanging:
      code = ErrorCode::kBackendUnavailable;
      reason = "the model is being loaded or unloaded";
      break;
    case shm::AttachStatus::kModelLoadFailed:
      code = ErrorCode::kBackendUnavailable;
      reason = "the model did not load";
      break;
  }
  // Model control's answers say all in their message.
  if (status == shm::AttachStatus::kUnknownModel || status == shm::AttachStatus::kModelChanging ||
      status == shm::AttachStatus::kModelLoadFailed) {
    return {code, fmt::format("daemon at {}: {}", socket_path, message)};
  }
  return {code, fmt::format("daemon at {} refused to attach: {} ({})", socket_path, reason, message)};
}

Error no_daemon(const std::string& socket_path, int err) {
  return {ErrorCode::kDaemonUnavailable,
          fmt::format("no batchd daemon at {} ({}); is it running?", socket_path, std::strerror(err))};
}

// Connects, retrying while the socket is missing or refuses, until the deadline.
client_detail::Attempt<shm::UniqueFd> connect_until(const std::string& path,
                                                    std::int64_t deadline_ns) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) return no_daemon(path, ENAMETOOLONG);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  for (;;) {
    shm::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return no_daemon(path, errno);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    const int err = errno;
    const bool worth_retrying = err == ENOENT || err == ECONNREFUSED || err == EAGAIN || err == EINTR;
    if (!worth_retrying || shm::monotonic_ns() + kConnectRetry.count() * 1'000'000 > deadline_ns) {
      return no_daemon(path, err);
    }
    std::this_thread::sleep_for(kConnectRetry);
  }
}

// Reads the daemon's reply; whether it came whole. A daemon that refused and closed may have done
// so before reading everything (the first receive then reports ECONNRESET) or before the hello
// arrived (`hello_sent` false); the reply it sent is still queued here, so one more receive, or a
// plain non-blocking one, reads it.
bool receive_reply(int conn, bool hello_sent, shm::AttachReply& reply,
                   std::vector<shm::UniqueFd>& fds) {
  if (!hello_sent) return ::recv(conn, &reply, sizeof(reply), MSG_DONTWAIT) == sizeof(reply);
  const auto bytes = std::as_writable_bytes(std::span(&reply, 1));
  Expected<std::size_t> n = shm::recv_with_fds(conn, bytes, fds);
  if (!n && n.error().code == std::errc::connection_reset) n = shm::recv_with_fds(conn, bytes, fds);
  return n && *n == sizeof(reply);
}

// Waits for the reply to a hello (or one sent before it arrived) and checks it.
client_detail::Attempt<Attachment> await_reply(shm::UniqueFd conn, const Expected<void>& sent,
                                               const std::string& socket_path,
                                               std::chrono::milliseconds timeout,
                                               std::int64_t deadline_ns, std::size_t fds_expected) {
  pollfd pfd{conn.get(), POLLIN, 0};
  const std::int64_t left_ms = std::max<std::int64_t>(0, (deadline_ns - shm::monotonic_ns()) / 1'000'000);
  if (sent && ::poll(&pfd, 1, static_cast<int>(left_ms)) <= 0) {
    return Error{ErrorCode::kDaemonUnavailable,
                 fmt::format("daemon at {} did not answer the attach request within {} ms",
                             socket_path, timeout.count())};
  }
  shm::AttachReply reply{};
  std::vector<shm::UniqueFd> fds;
  if (!receive_reply(conn.get(), bool(sent), reply, fds) || reply.magic != shm::kAttachMagic) {
    return Error{ErrorCode::kDaemonUnavailable,
                 !sent ? fmt::format("daemon at {} dropped the connection: {}", socket_path,
                                     sent.error().code.message())
                       : fmt::format("daemon at {} closed or sent a malformed attach reply",
                                     socket_path)};
  }
  if (reply.status != shm::AttachStatus::kOk) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    return refusal_error(reply.status, socket_path, reply.message);
  }
  if (fds.size() != fds_expected) {
    return Error{ErrorCode::kProtocolError,
                 fmt::format("daemon sent {} fds with its attach reply, expected {}", fds.size(),
                             fds_expected)};
  }
  reply.message[sizeof(reply.message) - 1] = '\0';
  return Attachment{std::move(conn), std::move(fds), reply.client_id, reply.message};
}

}  // namespace

std::string client_default_socket_path() {
  if (const char* env = std::getenv("BATCHD_SOCKET"); env != nullptr && *env != '\0') return env;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (::geteuid() == 0 || runtime == nullptr || *runtime == '\0') return "/run/batchd/batchd.sock";
  return std::string(runtime) + "/batchd/batchd.sock";
}

namespace {

client_detail::Attempt<Attachment> attach_once(const std::string& socket_path,
                                               std::chrono::milliseconds timeout,
                                               std::span<const std::byte> hello, std::size_t fds_expected,
                                               std::int64_t deadline_ns) {
  auto conn = connect_until(socket_path, deadline_ns);
  if (!conn) return conn.error();
  const Expected<void> sent = shm::send_with_fds(conn->get(), hello, {});
  // A daemon that refused may close before reading the hello: its reply is still worth reading.
  const bool hung_up = !sent && (sent.error().code == std::errc::broken_pipe ||
                                 sent.error().code == std::errc::connection_reset);
  if (!sent && !hung_up) {
    return Error{ErrorCode::kDaemonUnavailable,
                 fmt::format("daemon at {} dropped the connection: {}", socket_path,
                             sent.error().code.message())};
  }
  return await_reply(std::move(*conn), sent, socket_path, timeout, deadline_ns, fds_expected);
}

client_detail::Attempt<Attachment> attach_until(const std::string& socket_path, std::chrono::milliseconds timeout,
                                                std::span<const std::byte> hello, std::size_t fds_expected) {
  const std::int64_t deadline_ns = client_detail::deadline_after(timeout);
  for (;;) {
    auto attempt = attach_once(socket_path, timeout, hello, fds_expected, deadline_ns);
    // Busy: this user's handshake rate is spent (others of its processes attach at once, or one
    // floods); a token comes back within milliseconds, so try again while the deadline allows.
    if (attempt || attempt.error().code != ErrorCode::kOverloaded ||
        shm::monotonic_ns() + kBusyRetry.count() * 1'000'000 > deadline_ns) {
      return attempt;
    }
    std::this_thread::sleep_for(kBusyRetry);
  }
}

}  // namespace

client_detail::Attempt<Attachment> attach_to_daemon(const std::string& socket_path,
                                                    std::chrono::milliseconds timeout,
                                                    std::uint32_t flags) {
  const shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion, flags, 0};
  return attach_until(socket_path, timeout, std::as_bytes(std::span(&hello, 1)),
                      flags == 0 ? std::size_t{shm::kAttachFdCount} : std::size_t{1});
}

client_detail::Attempt<Attachment> control_model_on_daemon(const std::string& socket_path,
                                                           std::chrono::milliseconds timeout,
                                                           const shm::ModelControlHello& hello) {
  return attach_until(socket_path, timeout, std::as_bytes(std::span(&hello, 1)), 0);
}

client_detail::Attempt<Attachment> attach_worker_to_daemon(const std::string& socket_path,
                                                           std::chrono::milliseconds timeout,
                                                           const shm::WorkerHello& hello) {
  return attach_until(socket_path, timeout, std::as_bytes(std::span(&hello, 1)), shm::kWorkerAttachFds);
}

}  // namespace batchd

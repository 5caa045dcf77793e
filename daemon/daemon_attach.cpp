// The daemon's attach handshake and the end of a session. Every state a client reaches before
// it is attached has a deadline and a bound: handshakes are limited per uid and in all (the
// oldest makes way for a new one), attached clients in all and per uid, and each refusal is an
// AttachReply sent after the hello was read, so the client can say why.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "daemon/daemon.hpp"
#include "daemon/io_ops.hpp"
#include "shm/futex.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

namespace {

// Handshakes in progress at once, per peer uid and in all. A legitimate client sends its hello
// right after connecting, so making the oldest handshake of a full table give way only ever
// evicts connections that sat idle.
constexpr unsigned kMaxAttachingPerUid = 8;

}  // namespace

template <class... Args>
void Daemon::warn_limited(LogKind kind, fmt::format_string<Args...> format, Args&&... args) {
  std::string note;
  if (!log_limit_.allow(kind, shm::monotonic_ns(), note)) return;
  spdlog::warn("{}{}", fmt::format(format, std::forward<Args>(args)...), note);
}

void Daemon::accept_clients() {
  const std::int64_t now_ns = shm::monotonic_ns();
  while (auto accepted = control_->accept_one()) {
    auto& [fd, peer] = *accepted;
    unsigned& of_uid = attaching_per_uid_[peer.uid];
    if (of_uid >= kMaxAttachingPerUid) {
      auto oldest = std::find_if(attaching_.begin(), attaching_.end(),
                                 [&](const auto& entry) { return entry.second.peer.uid == peer.uid; });
      evict_attach(oldest, "newer connections of the same user are attaching");
    }
    if (attaching_.size() >= kMaxAttaching) {
      evict_attach(attaching_.begin(), "too many connections are attaching");
    }
    const std::uint64_t id = next_id_++;
    arm_poll(fd.get(), pack(Op::kAttach, id));
    ++attaching_per_uid_[peer.uid];
    attaching_.emplace(id, PendingAttach{std::move(fd), peer,
                                         now_ns + std::int64_t{config_.attach_timeout_ms} * 1'000'000});
  }
}

void Daemon::refuse(PendingAttach& pending, shm::AttachStatus status, const std::string& why) {
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = status;
  std::snprintf(reply.message, sizeof(reply.message), "%s", why.c_str());
  // The daemon's end is non-blocking; a client that never reads its reply loses only the reply.
  (void)shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), {});
  warn_limited(LogKind::kRefusal, "refused attach from pid {} uid {}: {}", pending.peer.pid,
               pending.peer.uid, why);
  pending.connection.reset();
}

void Daemon::evict_attach(std::map<std::uint64_t, PendingAttach>::iterator it, const std::string& why) {
  if (it == attaching_.end()) return;
  // Its poll holds the socket open until removed; the removal's completion is ignored, and a
  // poll that completed meanwhile finds no handshake under its id.
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_remove(sqe, pack(Op::kAttach, it->first));
  io_uring_sqe_set_data64(sqe, pack(Op::kIgnore, 0));
  refuse(it->second, shm::AttachStatus::kAttachTimeout, why);
  if (--attaching_per_uid_[it->second.peer.uid] == 0) attaching_per_uid_.erase(it->second.peer.uid);
  attaching_.erase(it);
}

std::int64_t Daemon::expire_attaches(std::int64_t now_ns) {
  while (!attaching_.empty() && attaching_.begin()->second.deadline_ns <= now_ns) {
    evict_attach(attaching_.begin(), "no attach request within " +
                                         std::to_string(config_.attach_timeout_ms) + " ms");
  }
  return attaching_.empty() ? 0 : attaching_.begin()->second.deadline_ns;
}

void Daemon::finish_attach(std::uint64_t id) {
  auto it = attaching_.find(id);
  if (it == attaching_.end()) return;
  const int fd = it->second.connection.get();
  shm::Hello hello{};
  std::vector<shm::UniqueFd> fds;  // a client has no fds to give; any it sent are closed here
  const Expected<std::size_t> n =
      shm::recv_with_fds(fd, std::as_writable_bytes(std::span(&hello, 1)), fds);
  if (!n && n.error().code == std::errc::resource_unavailable_try_again) {
    arm_poll(fd, pack(Op::kAttach, id));  // woken without data: keep waiting, until the deadline
    return;
  }
  PendingAttach pending = std::move(it->second);
  if (--attaching_per_uid_[pending.peer.uid] == 0) attaching_per_uid_.erase(pending.peer.uid);
  attaching_.erase(it);
  const PeerCredentials& peer = pending.peer;
  const bool truncated = !n && n.error().code == std::errc::protocol_error;
  if (!truncated && (!n || *n == 0)) return;  // gone before its hello: nobody to tell
  if (truncated || *n != sizeof(hello) || hello.magic != shm::kAttachMagic) {
    refuse(pending, shm::AttachStatus::kBadHello, "malformed attach request");
    return;
  }
  if (hello.protocol_version != shm::kProtocolVersion) {
    refuse(pending, shm::AttachStatus::kVersionMismatch,
           "daemon speaks protocol " + std::to_string(shm::kProtocolVersion) + ", client " +
               std::to_string(hello.protocol_version));
    return;
  }
  if (!fds.empty() || (hello.flags != 0 && hello.flags != shm::kHelloDeadLetters)) {
    refuse(pending, shm::AttachStatus::kBadHello, "attach request carried fds or unknown flags");
    return;
  }
  if (hello.flags == shm::kHelloDeadLetters) {
    answer_dead_letters(pending);
    return;
  }
  if (stop_requested_.load(std::memory_order_relaxed)) {
    refuse(pending, shm::AttachStatus::kShuttingDown, "the daemon is shutting down");
    return;
  }
  if (!peer_allowed(peer, config_.allowed_uids, config_.allowed_gids)) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "uid " + std::to_string(peer.uid) + " may not use this daemon");
    return;
  }
  if (sessions_.size() >= config_.max_clients) {
    refuse(pending, shm::AttachStatus::kTooManyClients,
           "the daemon already serves its maximum of " + std::to_string(config_.max_clients) +
               " clients");
    return;
  }
  if (auto of_uid = attached_per_uid_.find(peer.uid);
      of_uid != attached_per_uid_.end() && of_uid->second >= config_.max_clients_per_uid) {
    refuse(pending, shm::AttachStatus::kTooManyClientsForUser,
           "uid " + std::to_string(peer.uid) + " already has its maximum of " +
               std::to_string(config_.max_clients_per_uid) + " clients attached");
    return;
  }
  auto created = ClientSession::create(id, config_.segment, peer.pid, peer.uid);
  if (!created) {
    const std::string why = created.error().message;
    spdlog::error("cannot create a segment for pid {}: {}", peer.pid, why);
    refuse(pending, shm::AttachStatus::kInternalError, why);
    return;
  }
  std::shared_ptr<ClientSession> session = std::move(*created);
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = shm::AttachStatus::kOk;
  reply.client_id = static_cast<std::uint32_t>(id);
  const int out_fds[shm::kAttachFdCount] = {session->request_fd(), session->completion_fd(),
                                            session->doorbell_fd(), status_fd_.get()};
  if (auto sent = shm::send_with_fds(fd, std::as_bytes(std::span(&reply, 1)), out_fds); !sent) {
    warn_limited(LogKind::kAttachFailure, "attach of pid {} failed while sending its segment: {}",
                 peer.pid, sent.error().message);
    return;
  }
  session->set_connection(std::move(pending.connection));
  arm_poll(fd, pack(Op::kSession, id));
  arm_poll(session->doorbell_fd(), pack(Op::kClientDoorbell, id));
  ++attached_per_uid_[peer.uid];
  sessions_.emplace(id, session);
  drain_order_.push_back(std::move(session));
  stats_.clients_attached.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("client {} attached (pid {}, uid {})", id, peer.pid, peer.uid);
}

void Daemon::on_session_readable(std::uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  char buf[64];
  const ssize_t n = ::recv(it->second->connection(), buf, sizeof(buf), MSG_DONTWAIT);
  if (n > 0) {
    // The protocol has nothing to say after the hello: whatever comes is garbage, and reading
    // it one poll at a time would let a client keep the drain loop busy.
    drop_session(id, "sent data on its control connection after attaching");
    return;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    drop_session(id, nullptr);
    return;
  }
  arm_poll(it->second->connection(), pack(Op::kSession, id));
}

void Daemon::drop_session(std::uint64_t id, const char* why) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::shared_ptr<ClientSession> session = std::move(it->second);
  sessions_.erase(it);
  session->mark_closed();
  if (auto of_uid = attached_per_uid_.find(session->uid());
      of_uid != attached_per_uid_.end() && --of_uid->second == 0) {
    attached_per_uid_.erase(of_uid);
  }
  // Nobody reads the answers of a client that has gone: its requests still waiting for a batch
  // are dropped instead of run.
  stats_.requests_abandoned.fetch_add(pending_.forget(id), std::memory_order_relaxed);
  if (why != nullptr) {
    stats_.clients_dropped_for_violation.fetch_add(1, std::memory_order_relaxed);
    warn_limited(LogKind::kViolation, "dropping client {} (pid {}): {}", id, session->pid(), why);
  } else {
    spdlog::debug("client {} (pid {}) detached", id, session->pid());
  }
  stats_.clients_detached.fetch_add(1, std::memory_order_relaxed);
  // shutdown, not close: the pending poll holds the socket open, and the client must see the
  // hang-up now. The segment stays mapped until batches holding the session complete.
  ::shutdown(session->connection(), SHUT_RDWR);
  // The doorbell's poll would otherwise hold its eventfd (and an io_uring entry) forever.
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_remove(sqe, pack(Op::kClientDoorbell, id));
  io_uring_sqe_set_data64(sqe, pack(Op::kIgnore, 0));
  drain_order_.erase(std::remove(drain_order_.begin(), drain_order_.end(), session),
                     drain_order_.end());
}

}  // namespace batchd

// The daemon's attach handshake and the end of a session. Every state a client reaches before
// it is attached has a deadline and a bound: handshakes are limited per uid (a rate and a count)
// and in all (the user holding the most makes way for a newcomer), the drain loop spends a
// bounded budget on them per pass, attached clients are limited in all and per uid, and each
// refusal is an AttachReply, so the client can say why. No descriptor a peer could make a close
// of block is closed here: connections and whatever a peer passed go to the reaper, and a
// connection an io_uring poll still references is parked until that poll's completion, so the
// reaper's close is the last one.
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

// Handshakes in progress at once, per peer uid. A legitimate client sends its hello right after
// connecting, so making the oldest handshake of a full table give way only ever evicts
// connections that sat idle.
constexpr unsigned kMaxAttachingPerUid = 8;

}  // namespace

void Daemon::release_connection(shm::UniqueFd connection, std::uint64_t armed_poll) {
  if (!connection.valid()) return;
  if (control_->refuses_fds()) {
    // No peer could queue a descriptor on it, and a Unix socket does not linger: its close
    // cannot block, here or wherever io_uring drops its last reference. A connect-and-close
    // storm then costs no hand-off to the reaper per connection.
    connection.reset();
    return;
  }
  if (armed_poll != 0) {
    parked_.emplace(armed_poll, std::move(connection));
  } else {
    reaper_.drop(std::move(connection));
  }
}

bool Daemon::release_parked(std::uint64_t user_data) {
  auto it = parked_.find(user_data);
  if (it == parked_.end()) return false;
  reaper_.drop(std::move(it->second));
  parked_.erase(it);
  return true;
}

void Daemon::accept_clients() {
  const std::int64_t now_ns = shm::monotonic_ns();
  listen_deferred_ = false;
  for (;;) {
    if (!handshakes_.take_step()) {
      listen_deferred_ = true;  // the rest wait in the backlog for the next pass
      return;
    }
    auto accepted = control_->accept_one();
    if (!accepted) break;
    auto& [fd, peer] = *accepted;
    if (!handshakes_.admit(peer.uid, now_ns)) {
      shed(std::move(fd), peer);
      continue;
    }
    start_handshake(std::move(fd), peer, now_ns);
  }
  if (control_->fd() >= 0 && !stop_requested_.load(std::memory_order_relaxed)) {
    events_.arm_poll(control_->fd(), pack(Op::kListen, 0));
  }
}

void Daemon::shed(shm::UniqueFd connection, const PeerCredentials& peer) {
  stats_.connections_shed.fetch_add(1, std::memory_order_relaxed);
  PendingAttach pending{std::move(connection), peer, 0, false};
  refuse(pending, shm::AttachStatus::kBusy,
         "uid " + std::to_string(peer.uid) + " starts handshakes faster than " +
             std::to_string(static_cast<unsigned>(HandshakeLimiter::kPerUidPerSecond)) +
             " a second; retry later");
  release_connection(std::move(pending.connection), 0);
}

void Daemon::start_handshake(shm::UniqueFd connection, const PeerCredentials& peer, std::int64_t now_ns) {
  if (attaching_.of_uid(peer.uid) >= kMaxAttachingPerUid) {
    evict_attach(attaching_.oldest_of(peer.uid), "newer connections of the same user are attaching");
  }
  if (attaching_.size() >= kMaxAttaching) {
    // The user with the most handshakes open gives way: a flood of many users' idle connections
    // evicts its own, and a newcomer with none open always gets in.
    evict_attach(attaching_.oldest_of(attaching_.heaviest(peer.uid)), "too many connections are attaching");
  }
  const std::uint64_t id = next_id_++;
  attaching_.add(id, PendingAttach{std::move(connection), peer,
                                   now_ns + std::int64_t{config_.attach_timeout_ms} * 1'000'000, false});
  // Most clients send their hello with the connect: read it now rather than after a poll.
  read_hello(id);
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
}

void Daemon::evict_attach(std::uint64_t id, const std::string& why) {
  const PendingAttach* found = attaching_.find(id);
  if (found == nullptr) return;
  std::uint64_t armed = 0;
  if (found->polled) {
    // Its poll references the socket until its completion comes (the removal's is ignored);
    // the connection is parked until then.
    armed = pack(Op::kAttach, id);
    events_.remove_poll(armed);
  }
  PendingAttach pending = attaching_.take(id);
  refuse(pending, shm::AttachStatus::kAttachTimeout, why);
  release_connection(std::move(pending.connection), armed);
}

std::int64_t Daemon::expire_attaches(std::int64_t now_ns) {
  while (!attaching_.empty() && attaching_.next_deadline_ns() <= now_ns) {
    evict_attach(attaching_.oldest(), "no attach request within " + std::to_string(config_.attach_timeout_ms) + " ms");
  }
  return attaching_.next_deadline_ns();
}

void Daemon::on_attach_readable(std::uint64_t id) {
  PendingAttach* pending = attaching_.find(id);
  if (pending == nullptr) return;
  pending->polled = false;
  if (!handshakes_.take_step()) {
    attaching_.defer_hello(id);  // read in a later pass; its deadline still holds
    return;
  }
  read_hello(id);
}

void Daemon::read_due_hellos() {
  while (attaching_.hellos_due() && handshakes_.take_step()) read_hello(attaching_.next_due_hello());
}

void Daemon::read_hello(std::uint64_t id) {
  PendingAttach* waiting = attaching_.find(id);
  if (waiting == nullptr) return;
  const int fd = waiting->connection.get();
  shm::WorkerHello hello{};  // the larger of the two hellos; a client's fills its first bytes
  std::vector<shm::UniqueFd> fds;  // a client has no fds to give; any it sent go to the reaper
  const Expected<std::size_t> n =
      shm::recv_with_fds(fd, std::as_writable_bytes(std::span(&hello, 1)), fds);
  for (shm::UniqueFd& passed : fds) reaper_.drop(std::move(passed));
  if (!n && n.error().code == std::errc::resource_unavailable_try_again) {
    waiting->polled = true;
    events_.arm_poll(fd, pack(Op::kAttach, id));  // no hello yet: keep waiting, until the deadline
    return;
  }
  PendingAttach pending = attaching_.take(id);
  answer_hello(pending, n, hello, !fds.empty(), id);
  // Unless it became a session, the connection is done with; no poll references it.
  release_connection(std::move(pending.connection), 0);
}

void Daemon::answer_hello(PendingAttach& pending, const Expected<std::size_t>& n, const shm::WorkerHello& message,
                          bool carried_fds, std::uint64_t id) {
  const PeerCredentials& peer = pending.peer;
  const shm::Hello& hello = message.hello;
  const bool truncated = !n && n.error().code == std::errc::protocol_error;
  if (!truncated && (!n || *n == 0)) return;  // gone before its hello: nobody to tell
  const std::size_t size = hello.flags == shm::kHelloWorker         ? sizeof(shm::WorkerHello)
                           : hello.flags == shm::kHelloModelControl ? sizeof(shm::ModelControlHello)
                                                                    : sizeof(shm::Hello);
  if (truncated || *n != size || hello.magic != shm::kAttachMagic) {
    refuse(pending, shm::AttachStatus::kBadHello, "malformed attach request");
    return;
  }
  if (hello.protocol_version != shm::kProtocolVersion) {
    refuse(pending, shm::AttachStatus::kVersionMismatch,
           "daemon speaks protocol " + std::to_string(shm::kProtocolVersion) + ", client " +
               std::to_string(hello.protocol_version));
    return;
  }
  if (carried_fds ||
      (hello.flags != 0 && hello.flags != shm::kHelloDeadLetters && hello.flags != shm::kHelloWorker &&
       hello.flags != shm::kHelloModelControl)) {
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
  if (hello.flags == shm::kHelloModelControl) {  // daemon_models.cpp
    shm::ModelControlHello control{};
    std::memcpy(&control, &message, sizeof(control));
    answer_model_control(pending, control);
    return;
  }
  if (hello.flags == shm::kHelloWorker) {  // its own grant and limits (daemon_workers.cpp)
    attach_worker(pending, message, id);
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
  if (sessions_.of_uid(peer.uid) >= config_.max_clients_per_uid) {
    refuse(pending, shm::AttachStatus::kTooManyClientsForUser,
           "uid " + std::to_string(peer.uid) + " already has its maximum of " +
               std::to_string(config_.max_clients_per_uid) + " clients attached");
    return;
  }
  attach_session(pending, id);
}

void Daemon::attach_session(PendingAttach& pending, std::uint64_t id) {
  const PeerCredentials& peer = pending.peer;
  const shm::WirePriority granted =
      peer_allowed(peer, config_.high_priority_uids, config_.high_priority_gids)
          ? shm::WirePriority::kHigh
          : shm::WirePriority::kNormal;
  auto created = ClientSession::create(id, config_.segment, peer.pid, peer.uid, granted);
  if (!created) {
    const std::string why = created.error().message;
    spdlog::error("cannot create a segment for pid {}: {}", peer.pid, why);
    refuse(pending, shm::AttachStatus::kInternalError, why);
    return;
  }
  std::shared_ptr<ClientSession> session = std::move(*created);
  const int fd = pending.connection.get();
  const int out_fds[shm::kAttachFdCount] = {session->request_fd(), session->completion_fd(),
                                            session->doorbell_fd(), status_.fd()};
  if (!send_attached(pending, id, out_fds, "its segment")) return;
  session->set_connection(std::move(pending.connection));
  events_.arm_poll(fd, pack(Op::kSession, id));
  events_.arm_poll(session->doorbell_fd(), pack(Op::kClientDoorbell, id));
  sessions_.add(std::move(session));
  stats_.clients_attached.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("client {} attached (pid {}, uid {})", id, peer.pid, peer.uid);
}

bool Daemon::send_attached(const PendingAttach& pending, std::uint64_t id, std::span<const int> fds,
                           const char* what) {
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = shm::AttachStatus::kOk;
  reply.client_id = static_cast<std::uint32_t>(id);
  // The daemon's end is non-blocking; a peer that never reads loses its attachment.
  const auto sent = shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), fds);
  if (!sent) {
    warn_limited(LogKind::kAttachFailure, "attach of pid {} failed while sending {}: {}", pending.peer.pid, what,
                 sent.error().message);
  }
  return bool(sent);
}

void Daemon::on_session_readable(std::uint64_t id) {
  ClientSession* session = sessions_.find(id);
  if (session == nullptr) return;
  char byte = 0;
  // A peek: reading would take the descriptors a message may carry into this thread, and their
  // close could block; the reaper drains them with the connection.
  const ssize_t n = ::recv(session->connection(), &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  if (n > 0) {
    // The protocol has nothing to say after the hello: whatever comes is garbage, and reading
    // it one poll at a time would let a client keep the drain loop busy.
    drop_session(id, "sent data on its control connection after attaching", false);
    return;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    drop_session(id, nullptr, false);
    return;
  }
  events_.arm_poll(session->connection(), pack(Op::kSession, id));
}

void Daemon::drop_session(std::uint64_t id, const char* why, bool connection_polled) {
  std::shared_ptr<ClientSession> session = sessions_.take(id);
  if (!session) return;
  session->mark_closed();
  // Nobody reads the answers of a client that has gone: its requests still waiting for a batch
  // are dropped instead of run.
  for (auto& model : models_) stats_.requests_abandoned.fetch_add(model->forget(id), std::memory_order_relaxed);
  if (why != nullptr) {
    stats_.clients_dropped_for_violation.fetch_add(1, std::memory_order_relaxed);
    warn_limited(LogKind::kViolation, "dropping client {} (pid {}): {}", id, session->pid(), why);
  } else {
    spdlog::debug("client {} (pid {}) detached", id, session->pid());
  }
  stats_.clients_detached.fetch_add(1, std::memory_order_relaxed);
  // The client must see the hang-up now; the shutdown also completes the connection's poll,
  // which holds a reference to it until then. The connection leaves the session here, so the
  // last reference to the session (in a lane, once its batches complete) closes nothing a
  // client controls. The segment stays mapped until then.
  ::shutdown(session->connection(), SHUT_RDWR);
  release_connection(session->release_connection(), connection_polled ? pack(Op::kSession, id) : 0);
  // The doorbell's poll would otherwise hold its eventfd (and an io_uring entry) forever.
  events_.remove_poll(pack(Op::kClientDoorbell, id));
}

}  // namespace batchd

// The handshake's connection stage (accept, hello, deadline, refusal) and the client's role. No
// descriptor a peer could make a close of block is closed here: connections and whatever a peer
// passed go to the reaper (ParkedConnections).
#include "daemon/attach_handshake.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "daemon/io_ops.hpp"
#include "shm/clock.hpp"
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

void AttachHandshake::begin_pass() {
  limiter_.new_pass();
  // Hellos already accepted come first: a backlog a storm keeps full would otherwise spend every
  // pass's steps on accepts, and a deferred hello would wait past its deadline. They are bounded
  // by the handshake table, and each read retires one, so accepts still get steps.
  read_due_hellos();
  if (listen_deferred_) accept_clients();
}

void AttachHandshake::stop_listening() {
  p_.control.close_listener();
  listen_deferred_ = false;
}

void AttachHandshake::release_all() {
  attaching_.release_all([this](shm::UniqueFd connection) { p_.reaper.drop(std::move(connection)); });
}

void AttachHandshake::accept_clients() {
  listen_deferred_ = false;
  if (p_.stop_requested.load(std::memory_order_relaxed)) return;  // the listener is closing
  const std::int64_t now_ns = shm::monotonic_ns();
  for (;;) {
    if (!limiter_.take_step()) {
      listen_deferred_ = true;  // the rest wait in the backlog for the next pass
      return;
    }
    auto accepted = p_.control.accept_one();
    if (!accepted) break;
    auto& [fd, peer] = *accepted;
    if (!limiter_.admit(peer.uid, now_ns)) {
      shed(std::move(fd), peer);
      continue;
    }
    start(std::move(fd), peer, now_ns);
  }
  if (p_.control.fd() >= 0 && !p_.stop_requested.load(std::memory_order_relaxed)) {
    p_.events.arm_poll(p_.control.fd(), pack(Op::kListen, 0));
  }
}

void AttachHandshake::shed(shm::UniqueFd connection, const PeerCredentials& peer) {
  p_.stats.connections_shed.fetch_add(1, std::memory_order_relaxed);
  PendingAttach pending{std::move(connection), peer, 0, false};
  refuse(pending, shm::AttachStatus::kBusy,
         "uid " + std::to_string(peer.uid) + " starts handshakes faster than " +
             std::to_string(static_cast<unsigned>(HandshakeLimiter::kPerUidPerSecond)) +
             " a second; retry later");
  p_.parked.release(std::move(pending.connection), 0);
}

void AttachHandshake::start(shm::UniqueFd connection, const PeerCredentials& peer, std::int64_t now_ns) {
  if (attaching_.of_uid(peer.uid) >= kMaxAttachingPerUid) {
    evict(attaching_.oldest_of(peer.uid), "newer connections of the same user are attaching");
  }
  if (attaching_.size() >= kMaxAttaching) {
    // The user with the most handshakes open gives way: a flood of many users' idle connections
    // evicts its own, and a newcomer with none open always gets in.
    evict(attaching_.oldest_of(attaching_.heaviest(peer.uid)), "too many connections are attaching");
  }
  const std::uint64_t id = next_id_++;
  attaching_.add(id, PendingAttach{std::move(connection), peer,
                                   now_ns + std::int64_t{p_.config.attach_timeout_ms} * 1'000'000, false});
  // Most clients send their hello with the connect: read it now rather than after a poll.
  read_hello(id);
}

shm::AttachReply AttachHandshake::reply_of(shm::AttachStatus status) noexcept {
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = status;
  return reply;
}

void AttachHandshake::refuse(PendingAttach& pending, shm::AttachStatus status, const std::string& why) {
  shm::AttachReply reply = reply_of(status);
  std::snprintf(reply.message, sizeof(reply.message), "%s", why.c_str());
  // The daemon's end is non-blocking; a client that never reads its reply loses only the reply.
  (void)shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), {});
  p_.log_limit.warn(LogKind::kRefusal, "refused attach from pid {} uid {}: {}", pending.peer.pid, pending.peer.uid,
                    why);
}

void AttachHandshake::evict(std::uint64_t id, const std::string& why) {
  const PendingAttach* found = attaching_.find(id);
  if (found == nullptr) return;
  std::uint64_t armed = 0;
  if (found->polled) {
    // Its poll references the socket until its completion comes (the removal's is ignored);
    // the connection is parked until then.
    armed = pack(Op::kAttach, id);
    p_.events.remove_poll(armed);
  }
  PendingAttach pending = attaching_.take(id);
  refuse(pending, shm::AttachStatus::kAttachTimeout, why);
  p_.parked.release(std::move(pending.connection), armed);
}

void AttachHandshake::expire(std::int64_t now_ns) {
  while (!attaching_.empty() && attaching_.next_deadline_ns() <= now_ns) {
    evict(attaching_.oldest(), "no attach request within " + std::to_string(p_.config.attach_timeout_ms) + " ms");
  }
}

void AttachHandshake::on_readable(std::uint64_t id) {
  PendingAttach* pending = attaching_.find(id);
  if (pending == nullptr) return;
  pending->polled = false;
  if (!limiter_.take_step()) {
    attaching_.defer_hello(id);  // read in a later pass; its deadline still holds
    return;
  }
  read_hello(id);
}

void AttachHandshake::read_due_hellos() {
  while (attaching_.hellos_due() && limiter_.take_step()) read_hello(attaching_.next_due_hello());
}

void AttachHandshake::read_hello(std::uint64_t id) {
  PendingAttach* waiting = attaching_.find(id);
  if (waiting == nullptr) return;
  const int fd = waiting->connection.get();
  shm::WorkerHello hello{};  // the larger of the two hellos; a client's fills its first bytes
  std::vector<shm::UniqueFd> fds;  // a client has no fds to give; any it sent go to the reaper
  const Expected<std::size_t> n =
      shm::recv_with_fds(fd, std::as_writable_bytes(std::span(&hello, 1)), fds);
  for (shm::UniqueFd& passed : fds) p_.reaper.drop(std::move(passed));
  if (!n && n.error().code == std::errc::resource_unavailable_try_again) {
    waiting->polled = true;
    p_.events.arm_poll(fd, pack(Op::kAttach, id));  // no hello yet: keep waiting, until the deadline
    return;
  }
  PendingAttach pending = attaching_.take(id);
  answer(pending, n, hello, !fds.empty(), id);
  // Unless it became a session, the connection is done with; no poll references it.
  p_.parked.release(std::move(pending.connection), 0);
}

void AttachHandshake::answer(PendingAttach& pending, const Expected<std::size_t>& n, const shm::WorkerHello& message,
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
  if (p_.stop_requested.load(std::memory_order_relaxed)) {
    refuse(pending, shm::AttachStatus::kShuttingDown, "the daemon is shutting down");
    return;
  }
  if (hello.flags == shm::kHelloModelControl) {  // attach_answers.cpp
    shm::ModelControlHello control{};
    std::memcpy(&control, &message, sizeof(control));
    answer_model_control(pending, control);
    return;
  }
  if (hello.flags == shm::kHelloWorker) {  // its own grant and limits (attach_worker.cpp)
    attach_worker(pending, message, id);
    return;
  }
  if (!peer_allowed(peer, p_.config.allowed_uids, p_.config.allowed_gids)) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "uid " + std::to_string(peer.uid) + " may not use this daemon");
    return;
  }
  if (p_.sessions.size() >= p_.config.max_clients) {
    refuse(pending, shm::AttachStatus::kTooManyClients,
           "the daemon already serves its maximum of " + std::to_string(p_.config.max_clients) +
               " clients");
    return;
  }
  if (p_.sessions.of_uid(peer.uid) >= p_.config.max_clients_per_uid) {
    refuse(pending, shm::AttachStatus::kTooManyClientsForUser,
           "uid " + std::to_string(peer.uid) + " already has its maximum of " +
               std::to_string(p_.config.max_clients_per_uid) + " clients attached");
    return;
  }
  attach_session(pending, id);
}

void AttachHandshake::attach_session(PendingAttach& pending, std::uint64_t id) {
  const PeerCredentials& peer = pending.peer;
  const shm::WirePriority granted =
      peer_allowed(peer, p_.config.high_priority_uids, p_.config.high_priority_gids)
          ? shm::WirePriority::kHigh
          : shm::WirePriority::kNormal;
  auto created = ClientSession::create(id, p_.config.segment, peer.pid, peer.uid, granted);
  if (!created) {
    const std::string why = created.error().message;
    spdlog::error("cannot create a segment for pid {}: {}", peer.pid, why);
    refuse(pending, shm::AttachStatus::kInternalError, why);
    return;
  }
  std::shared_ptr<ClientSession> session = std::move(*created);
  session->set_cache(p_.caches.for_user(peer.uid));
  const int fd = pending.connection.get();
  const int out_fds[shm::kAttachFdCount] = {session->request_fd(), session->completion_fd(),
                                            session->doorbell_fd(),  p_.status.fd(),
                                            session->cache()->fd(),  p_.caches.shared().fd()};
  if (!send_attached(pending, id, out_fds, "its segment")) return;
  session->set_connection(std::move(pending.connection));
  p_.events.arm_poll(fd, pack(Op::kSession, id));
  p_.events.arm_poll(session->doorbell_fd(), pack(Op::kClientDoorbell, id));
  p_.sessions.add(std::move(session));
  p_.stats.clients_attached.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("client {} attached (pid {}, uid {})", id, peer.pid, peer.uid);
}

bool AttachHandshake::send_attached(const PendingAttach& pending, std::uint64_t id, std::span<const int> fds,
                           const char* what) {
  shm::AttachReply reply = reply_of(shm::AttachStatus::kOk);
  reply.client_id = static_cast<std::uint32_t>(id);
  // The daemon's end is non-blocking; a peer that never reads loses its attachment.
  const auto sent = shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), fds);
  if (!sent) {
    p_.log_limit.warn(LogKind::kAttachFailure, "attach of pid {} failed while sending {}: {}", pending.peer.pid, what,
                 sent.error().message);
  }
  return bool(sent);
}

}  // namespace batchd

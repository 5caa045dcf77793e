// The control socket's handshake: accepting a connection, reading its hello within a deadline and
// the drain pass's budget, and answering it in the role it asks for: a client (a session and its
// segment), a worker process (a device of its model), the dead-letter query or model control (one
// answer, then the connection ends). Every state a peer reaches before it is attached has a
// deadline and a bound: handshakes are limited per uid (a rate and a count) and in all (the user
// holding the most makes way for a newcomer), attached clients in all and per uid, and each
// refusal is an AttachReply, so the peer can say why. What happens to a session or a worker once
// attached is the daemon's. Drain thread only.
#pragma once

// Before liburing (event_ring.hpp): <linux/fs.h> defines a BLOCK_SIZE macro that breaks
// moodycamel's queue, which the models' routers include.
#include "daemon/model_registry.hpp"

#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "base/expected.hpp"
#include "daemon/config.hpp"
#include "daemon/control_socket.hpp"
#include "daemon/dead_letter_log.hpp"
#include "daemon/event_ring.hpp"
#include "daemon/fd_reaper.hpp"
#include "daemon/handshake_limiter.hpp"
#include "daemon/log_limiter.hpp"
#include "daemon/model_changes.hpp"
#include "daemon/parked_connections.hpp"
#include "daemon/pending_attaches.hpp"
#include "daemon/response_caches.hpp"
#include "daemon/session_table.hpp"
#include "daemon/stats.hpp"
#include "daemon/status_writer.hpp"
#include "daemon/worker_roster.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/model_control.hpp"
#include "shm/worker_region.hpp"

namespace batchd {

class AttachHandshake {
 public:
  // Connections in the handshake at once.
  static constexpr unsigned kMaxAttaching = 128;

  // The daemon's parts a handshake reads, or adds the peer to; all outlive the handshake.
  struct Parts {
    const DaemonConfig& config;
    ControlSocket& control;
    EventRing& events;
    FdReaper& reaper;
    ParkedConnections& parked;
    LogLimiter& log_limit;
    DaemonStats& stats;
    SessionTable& sessions;
    WorkerRoster& workers;
    ModelRegistry& models;
    ModelChanges& changes;
    ResponseCaches& caches;
    const StatusWriter& status;
    const DeadLetterLog& dead_letters;
    const std::atomic<bool>& stop_requested;
  };

  explicit AttachHandshake(Parts parts) : p_(parts) {}
  AttachHandshake(const AttachHandshake&) = delete;
  AttachHandshake& operator=(const AttachHandshake&) = delete;

  // A drain pass begins: its budget of handshake steps is full again, and the steps the last
  // pass left over (connections in the backlog, hellos that came) are taken first.
  void begin_pass();
  // The listening socket's poll fired: accepts within the pass's budget, and polls again.
  void accept_clients();
  // A handshake's poll fired: reads its hello now, or in a later pass once this one's budget
  // is spent.
  void on_readable(std::uint64_t id);
  // Evicts the handshakes past their deadline (next_deadline_ns() says when the next is due).
  void expire(std::int64_t now_ns);
  // Steps the last pass's budget left over: the drain loop must not sleep on them.
  [[nodiscard]] bool steps_waiting() const noexcept { return listen_deferred_ || attaching_.hellos_due(); }
  // The first handshake's deadline (0: none waiting).
  [[nodiscard]] std::int64_t next_deadline_ns() const noexcept { return attaching_.next_deadline_ns(); }
  // Stopping: no new connection is accepted (those already in their handshake are refused as
  // their hellos come).
  void stop_listening();
  // Once the io_uring is closed: the connections still in their handshake go to the reaper.
  void release_all();

 private:
  // Refuses a connection whose user starts handshakes past its rate, right after accept.
  void shed(shm::UniqueFd connection, const PeerCredentials& peer);
  void start(shm::UniqueFd connection, const PeerCredentials& peer, std::int64_t now_ns);
  void read_due_hellos();
  // Reads a hello (or keeps waiting for it) and answers it; the handshake ends unless it waits.
  void read_hello(std::uint64_t id);
  // `message`: what was read (a client's Hello, or a worker's WorkerHello: n says which).
  void answer(PendingAttach& pending, const Expected<std::size_t>& n, const shm::WorkerHello& message,
              bool carried_fds, std::uint64_t id);
  // Ends a handshake early: refuses it, stops waiting for its hello and forgets it.
  void evict(std::uint64_t id, const std::string& why);
  // Refuses a peer whose hello was read (or who is past its handshake's deadline): the reply
  // says why. The caller releases the connection.
  void refuse(PendingAttach& pending, shm::AttachStatus status, const std::string& why);
  // An AttachReply of this protocol with `status`, to fill in and send.
  static shm::AttachReply reply_of(shm::AttachStatus status) noexcept;
  // Sends the AttachReply of a successful attach with `fds`; false (and a warning naming `what`)
  // when the peer's end cannot take it.
  bool send_attached(const PendingAttach& pending, std::uint64_t id, std::span<const int> fds, const char* what);

  // The roles. A client: a session of its own.
  void attach_session(PendingAttach& pending, std::uint64_t id);
  // A worker process (attach_worker.cpp): its own grant (a worker sees every client's inputs)
  // and a region of its own; it becomes a device of the model it serves.
  void attach_worker(PendingAttach& pending, const shm::WorkerHello& hello, std::uint64_t id);
  // The model a worker whose hello names `name` serves; nullptr, having refused it (saying which
  // models workers serve), when none: a model run in process, or a name no model has while the
  // default model is not served by workers.
  ModelPipeline* model_for_worker(PendingAttach& pending, const std::string& name);
  // The dead-letter query (shm::kHelloDeadLetters; attach_answers.cpp).
  void answer_dead_letters(PendingAttach& pending);
  // Model control: who may ask, and for which model (attach_answers.cpp); the change itself is
  // ModelChanges'.
  void answer_model_control(PendingAttach& pending, const shm::ModelControlHello& hello);

  Parts p_;
  std::uint64_t next_id_ = 1;  // a connection's id, kept by the session or worker it becomes
  PendingAttaches attaching_;
  HandshakeLimiter limiter_;
  bool listen_deferred_ = false;  // connections wait in the backlog for the next pass
};

}  // namespace batchd

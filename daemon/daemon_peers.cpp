// The attached peers' control connections, once their handshake is done (attach_handshake.hpp):
// a client may send nothing more, a worker one notice (it is stopping); a hang-up, a crash or a
// protocol violation ends either. A client's requests still waiting for a batch are dropped; a
// worker's device closes in its model's router and its running batches run elsewhere.
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>

#include "daemon/daemon.hpp"
#include "daemon/io_ops.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

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
  session->credit_cache_hits(stats_.by_model);  // its last hits count too
  if (sessions_.of_uid(session->uid()) == 0) caches_.release_user(session->uid());
  // Nobody reads the answers of a client that has gone: its requests still waiting for a batch
  // are dropped instead of run.
  for (auto& model : models_) stats_.requests_abandoned.fetch_add(model->forget(id), std::memory_order_relaxed);
  if (why != nullptr) {
    stats_.clients_dropped_for_violation.fetch_add(1, std::memory_order_relaxed);
    log_limit_.warn(LogKind::kViolation, "dropping client {} (pid {}): {}", id, session->pid(), why);
  } else {
    spdlog::debug("client {} (pid {}) detached", id, session->pid());
  }
  stats_.clients_detached.fetch_add(1, std::memory_order_relaxed);
  // The client must see the hang-up now; the shutdown also completes the connection's poll,
  // which holds a reference to it until then. The connection leaves the session here, so the
  // last reference to the session (in a lane, once its batches complete) closes nothing a
  // client controls. The segment stays mapped until then.
  ::shutdown(session->connection(), SHUT_RDWR);
  parked_.release(session->release_connection(), connection_polled ? pack(Op::kSession, id) : 0);
  // The doorbell's poll would otherwise hold its eventfd (and an io_uring entry) forever.
  events_.remove_poll(pack(Op::kClientDoorbell, id));
}

void Daemon::on_worker_readable(std::uint64_t id) {
  AttachedWorker* worker = workers_.find(id);
  if (worker == nullptr) return;
  const std::shared_ptr<WorkerLink>& link = worker->link;
  const int fd = link->connection_fd();
  shm::WorkerNotice notice{};
  std::vector<shm::UniqueFd> fds;
  const Expected<std::size_t> n =
      shm::recv_with_fds(fd, std::as_writable_bytes(std::span(&notice, 1)), fds, MSG_DONTWAIT);
  const bool carried_fds = !fds.empty();
  for (shm::UniqueFd& passed : fds) reaper_.drop(std::move(passed));
  if (!n && n.error().code == std::errc::resource_unavailable_try_again) {
    events_.arm_poll(fd, pack(Op::kWorker, id));
    return;
  }
  if (!n || *n == 0) {
    drop_worker(id, nullptr, false);
    return;
  }
  if (carried_fds || *n != sizeof(notice) || notice.magic != shm::kWorkerNoticeMagic ||
      notice.kind != shm::WorkerNoticeKind::kStopping) {
    drop_worker(id, "sent something other than a stopping notice on its control connection", false);
    return;
  }
  // Its running batches finish; new ones go elsewhere from now on. The link hangs up once none
  // runs, and this poll then sees the connection end.
  spdlog::info("{} is stopping: it takes no new batches", link->label());
  worker->model->router().close_device(worker->slot);
  link->begin_stopping();
  events_.arm_poll(fd, pack(Op::kWorker, id));
}

void Daemon::drop_worker(std::uint64_t id, const char* why, bool connection_polled) {
  const std::optional<AttachedWorker> taken = workers_.take(id);
  if (!taken) return;
  const AttachedWorker& worker = *taken;
  worker.model->router().close_device(worker.slot);
  worker.model->workers()->remove(worker.slot);
  const std::string dropped_for = worker.link->drop_reason();
  worker.link->hang_up(why != nullptr ? why : "it hung up");  // its running batches return and run elsewhere
  if (why != nullptr) {
    stats_.workers_dropped.fetch_add(1, std::memory_order_relaxed);
    log_limit_.warn(LogKind::kViolation, "dropping {}: {}", worker.link->label(), why);
  } else if (!dropped_for.empty() && dropped_for != "stopped") {
    stats_.workers_dropped.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("{} dropped: {}", worker.link->label(), dropped_for);
  } else {
    spdlog::info("{} detached{}", worker.link->label(), dropped_for == "stopped" ? " after stopping" : "");
  }
  parked_.release(worker.link->take_connection(), connection_polled ? pack(Op::kWorker, id) : 0);
}

void Daemon::drop_all_workers() {
  while (!workers_.empty()) {
    const std::uint64_t id = workers_.any_id();
    // The poll on its connection stays armed: the shutdown completes it, and that completion
    // releases the parked connection.
    drop_worker(id, nullptr, true);
  }
}

void Daemon::drop_workers_of(ModelPipeline& model) {
  for (const std::uint64_t id : workers_.serving(&model)) drop_worker(id, nullptr);
}

}  // namespace batchd

// The drain loop's events: routing each of the event ring's completions by the operation packed
// in its user_data, and sleeping until there is work (or a deadline to keep).

#include <algorithm>

#include "daemon/daemon.hpp"
#include "daemon/io_ops.hpp"
#include "shm/clock.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;
using io_ops::op_of;
using io_ops::id_of;

namespace {

constexpr std::int64_t kStopPollNs = 1'000'000;

}  // namespace

void Daemon::handle_event(std::uint64_t user_data, int result) {
  switch (op_of(user_data)) {
    case Op::kListen:
      handshake_->accept_clients();
      break;
    case Op::kDoorbell:
      events_.rearm_doorbell();
      break;
    case Op::kAttach:
      if (!parked_.poll_completed(user_data)) handshake_->on_readable(id_of(user_data));
      break;
    case Op::kSession:
      if (!parked_.poll_completed(user_data) && result >= 0) on_session_readable(id_of(user_data));
      break;
    case Op::kClientDoorbell:
      if (ClientSession* session = sessions_.find(id_of(user_data)); session != nullptr && result >= 0) {
        session->drain_doorbell();
        events_.arm_poll(session->doorbell_fd(), user_data);
      }
      break;
    case Op::kWorker:
      if (!parked_.poll_completed(user_data) && result >= 0) on_worker_readable(id_of(user_data));
      break;
    case Op::kIgnore:
      break;
  }
}

bool Daemon::work_waiting() {
  // Handshake steps left over by the last pass's budget.
  if (handshake_->steps_waiting()) return true;
  if (sessions_.any_pending()) return true;  // rings are drained whether or not a batch object is free
  return std::any_of(models_.begin(), models_.end(), [](const auto& model) { return model->work_waiting(); });
}

void Daemon::sleep_until_work() {
  // seq_cst, as are the producers' tail stores and their reads of this flag: either they see the
  // flag and ring the doorbell, or the re-check below sees their entry.
  status_.page().drain_sleeping.store(1, std::memory_order_seq_cst);
  if (!work_waiting()) {
    std::int64_t wait_ns = -1;  // none: until an event
    const std::int64_t now_ns = shm::monotonic_ns();
    for (const auto& model : models_) {
      const std::int64_t bound_ns = model->sleep_bound_ns(now_ns);
      if (bound_ns >= 0) wait_ns = wait_ns < 0 ? bound_ns : std::min(wait_ns, bound_ns);
    }
    if (const std::int64_t deadline_ns = handshake_->next_deadline_ns(); deadline_ns != 0) {
      const std::int64_t until_expiry = std::max<std::int64_t>(0, deadline_ns - shm::monotonic_ns());
      wait_ns = wait_ns < 0 ? until_expiry : std::min(wait_ns, until_expiry);
    }
    if (caches_.any_cached()) {
      // Clients' own hits wake nothing: the tally (credit_cache_hits) keeps its period anyway.
      const std::int64_t until_tally = std::max<std::int64_t>(0, next_cache_tally_ns_ - shm::monotonic_ns());
      wait_ns = wait_ns < 0 ? until_tally : std::min(wait_ns, until_tally);
    }
    if (watchdog_interval_ns_ != 0) {
      const std::int64_t until_ping = std::max<std::int64_t>(0, next_watchdog_ns_ - shm::monotonic_ns());
      wait_ns = wait_ns < 0 ? until_ping : std::min(wait_ns, until_ping);
    }
    const bool unloading = std::any_of(models_.begin(), models_.end(), [](const auto& model) {
      return model->lifecycle() == ModelPipeline::Lifecycle::kUnloading;
    });
    if (stop_requested_.load(std::memory_order_relaxed) || unloading) {
      // Stopping, or a model unloading: poll for the last batches to come back (a lane's doorbell
      // may come before the router is idle) rather than wait on clients.
      wait_ns = wait_ns < 0 ? kStopPollNs : std::min(wait_ns, kStopPollNs);
    }
    events_.wait(wait_ns);
  }
  status_.page().drain_sleeping.store(0, std::memory_order_seq_cst);
}

}  // namespace batchd

// The router's watchdog: every few tens of milliseconds it abandons runs past the hang timeout
// (their batches run again elsewhere), moves batches queued behind unavailable devices and stalled
// runs, reads device memory, sends held batches again and publishes the status.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/router.hpp"
#include "daemon/tsan_handoff.hpp"
#include "shm/clock.hpp"

namespace batchd {

void Router::watchdog() noexcept {
  const auto period = std::clamp(options_.device_timeout / 4, std::chrono::milliseconds(1),
                                 std::chrono::milliseconds(50));
  std::unique_lock lock(watchdog_mu_);
  for (;;) {
    watchdog_cv_.wait_for(lock, period, [&] { return stopping_ || kicked_.load(std::memory_order_acquire); });
    if (stopping_) return;
    kicked_.store(false, std::memory_order_relaxed);
    const std::int64_t now_ns = shm::monotonic_ns();
    for (unsigned d = 0; d < health_.size(); ++d) note_if_lost(d);
    for (auto& lane : lanes_) check_lane_timeout(*lane, now_ns);
    requeue_from_unavailable(now_ns);
    refresh_memory();
    retry_held(now_ns);
    on_tick_();
  }
}

void Router::check_lane_timeout(Lane& lane, std::int64_t now_ns) noexcept {
  Batch* batch = lane.running.load(std::memory_order_acquire);
  if (batch == nullptr) return;
  const std::uint64_t token = lane.running_token.load(std::memory_order_relaxed);
  const std::int64_t started = lane.started_ns.load(std::memory_order_relaxed);
  if (now_ns - started < device_timeout_ns()) return;
  // Two holds on an abandoned run (this copy, and the lane's return): whichever lets go last
  // returns the object to the pool, so the lane never clears it while it is being copied. Only
  // this thread abandons runs, so a hold count of 0 here is this object's own.
  int free_of_holds = 0;
  if (!batch->abandon_holds.compare_exchange_strong(free_of_holds, 2, std::memory_order_acq_rel)) return;
  std::uint64_t running = make_run_state(token, RunPhase::kRunning);
  if (!batch->run_state.compare_exchange_strong(running, make_run_state(token, RunPhase::kAbandoned),
                                                std::memory_order_acq_rel)) {
    batch->abandon_holds.store(0, std::memory_order_release);
    return;  // finished meanwhile, or the object was reused for another run
  }
  abandoned_.fetch_add(1, std::memory_order_relaxed);
  lane.stuck.store(true, std::memory_order_release);
  DeviceHealth& h = *health_[lane.id.device];
  h.record_timeout();
  h.mark_unhealthy(now_ns);
  spdlog::warn("{} device {} stream {}: batch of {} ran past {} ms; marked unhealthy, re-running "
               "it elsewhere",
               backend_.name(), lane.id.device, lane.id.stream, batch->size(),
               options_.device_timeout.count());
  if (batch->shadow) {  // a hung probe: the device is marked, and nobody waits for its answer
    // A hung warm-up ends its device's warm-up now: its health decides from here, and a run that
    // may never return must not keep the model warming.
    finish_warmup(*batch);
    let_go_of_abandoned(batch);
    backend_.device_hung(lane.id.device);
    return;
  }
  Batch* copy = acquire_extra();
  batch->copy_into(*copy);
  copy->failed_devices |= device_bit(lane.id.device);
  copy->hung_devices |= device_bit(lane.id.device);
  let_go_of_abandoned(batch);
  dispatch(copy);
  backend_.device_hung(lane.id.device);  // after the copy: the run may return at once now
}

void Router::let_go_of_abandoned(Batch* batch) noexcept {
  if (batch->abandon_holds.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  abandoned_.fetch_sub(1, std::memory_order_relaxed);
  release(batch);
}

void Router::requeue_from_unavailable(std::int64_t now_ns) noexcept {
  // Batches queued behind a device that went unhealthy would wait out its back-off, and those
  // behind a stalled run would wait for it until the hang timeout: move them. From a stalled
  // lane only where another lane runs (they would come back to it otherwise).
  const bool others_run = std::any_of(lanes_.begin(), lanes_.end(), [&](const auto& lane) {
    return lane_usable(*lane, now_ns) && !stalled(*lane, now_ns);
  });
  for (auto& lane : lanes_) {
    const DeviceHealth& h = *health_[lane->id.device];
    const bool unavailable = h.state() == DeviceState::kUnhealthy || h.state() == DeviceState::kLost ||
                             !h.present() || !lane->open.load(std::memory_order_acquire);
    // A warming device's queue holds its warm-up alone, and an unmeasured first run looks
    // stalled at once: what it is there to pay.
    const bool warming = speed_[lane->id.device]->warming.load(std::memory_order_acquire) != 0;
    if (!unavailable && !lane->stuck.load(std::memory_order_acquire) &&
        !(others_run && !warming && stalled(*lane, now_ns))) {
      continue;
    }
    Batch* batch = nullptr;
    while (lane->queue.try_dequeue(batch)) {
      if (batch == nullptr) {  // a stop request: put it back for the worker
        lane->queue.enqueue(nullptr);
        break;
      }
      handoff_acquire(batch);
      unqueue(*lane, *batch);
      dispatch(batch);
    }
  }
}

void Router::unqueue(Lane& lane, const Batch& batch) noexcept {
  DeviceHealth& h = *health_[lane.id.device];
  lane.outstanding.fetch_sub(1, std::memory_order_relaxed);
  lane.outstanding_items.fetch_sub(batch.size(), std::memory_order_relaxed);
  h.outstanding_items.fetch_sub(batch.size(), std::memory_order_relaxed);
  h.outstanding_batches.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace batchd

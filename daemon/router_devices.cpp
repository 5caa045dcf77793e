// Devices that come and go (worker processes): a place opens when a device arrives and closes
// when it leaves; a device warms up before it takes requests; a batch whose device went away
// under it runs again elsewhere, blameless; a batch that no device can take waits for one, within
// its requests' deadlines.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/router.hpp"
#include "shm/clock.hpp"

namespace batchd {

void Router::open_device(unsigned device, unsigned streams) noexcept {
  cost_[device]->reset();
  open_window(device, shm::monotonic_ns());
  refresh_pool_speed();
  for (auto& lane : lanes_) {
    if (lane->id.device == device) lane->open.store(lane->id.stream < streams, std::memory_order_release);
  }
  const std::vector<Batch*> warmup = make_warmup(device);  // counted before the device is there
  health_[device]->arrive();
  send_warmup(device, warmup);
  kick_watchdog();  // batches waiting for a device go now, not at the next tick
}

std::vector<Batch*> Router::make_warmup(unsigned device) noexcept {
  const WarmupOptions& plan = options_.warmup;
  std::vector<Batch*> batches;
  if (!plan.enabled()) return batches;
  try {
    batches.reserve(kMaxWarmupBatches);
    std::size_t next = 0;  // the inputs are cycled through every batch
    for (unsigned round = 0; round < plan.rounds && batches.size() < kMaxWarmupBatches; ++round) {
      for (const std::uint32_t size : plan.batch_sizes) {
        if (batches.size() == kMaxWarmupBatches) break;
        Batch* batch = acquire_extra();
        batches.push_back(batch);
        batch->shadow = true;
        batch->opened_ns = shm::monotonic_ns();
        for (std::uint32_t i = 0; i < size; ++i) {
          const std::string& input = plan.inputs[next % plan.inputs.size()];
          if (i > 0 && batch->input_bytes.size() + input.size() > plan.max_batch_bytes) break;
          batch->append(input, RequestRef{});
          ++next;
        }
      }
    }
  } catch (const std::exception& e) {  // out of memory: the device goes cold rather than the daemon down
    spdlog::warn("{} device {}: no warm-up: {}", backend_.name(), device, e.what());
    for (Batch* batch : batches) release(batch);
    return {};
  }
  for (Batch* batch : batches) batch->warms_device = device;
  speed_[device]->warming.fetch_add(static_cast<std::uint32_t>(batches.size()), std::memory_order_acq_rel);
  return batches;
}

void Router::finish_warmup(Batch& batch) noexcept {
  if (batch.warms_device == Batch::kNoWarmup) return;
  const unsigned device = batch.warms_device;
  batch.warms_device = Batch::kNoWarmup;
  if (speed_[device]->warming.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    spdlog::info("{} device {}: warm-up over; it takes requests now", backend_.name(), device);
    kick_watchdog();  // batches held for it go now
  }
}

void Router::send_warmup(unsigned device, const std::vector<Batch*>& batches) noexcept {
  if (batches.empty()) return;
  std::vector<Lane*> open;
  for (auto& lane : lanes_) {
    if (lane->id.device == device && lane->open.load(std::memory_order_acquire)) open.push_back(lane.get());
  }
  spdlog::info("{} device {}: warming up ({} batches) before it takes requests", backend_.name(), device,
               batches.size());
  for (std::size_t i = 0; i < batches.size(); ++i) {
    if (open.empty()) {
      release(batches[i]);  // no lane runs here (it closed meanwhile): nothing to warm
      continue;
    }
    enqueue_on(*open[i % open.size()], batches[i]);
  }
}

void Router::close_device(unsigned device) noexcept {
  DeviceHealth& h = *health_[device];
  h.retire(h.incarnation());
  kick_watchdog();  // what is queued for it moves elsewhere now
}

void Router::abandon_waiting() noexcept {
  abandon_waiting_.store(true, std::memory_order_release);
  kick_watchdog();
}

void Router::kick_watchdog() noexcept {
  kicked_.store(true, std::memory_order_release);
  watchdog_cv_.notify_all();
}

void Router::rerun_after_device_fault(Lane& lane, std::uint64_t incarnation, Batch* batch,
                                      std::string message) noexcept {
  if (!settle(lane, batch)) return;
  const unsigned device = lane.id.device;
  // Until the daemon closes the place, the lanes that see the device gone keep the router from
  // sending it this batch again.
  if (health_[device]->retire(incarnation)) {
    spdlog::warn("{} device {} went away: {}; its batches run elsewhere", backend_.name(), device, message);
  }
  if (batch->shadow) {  // a probe is not run again: it answers nobody
    release(batch);
    return;
  }
  batch->last_error = std::move(message);
  // A device that goes away under the same batch again and again is taken down by it: an input
  // that crashes the model would otherwise kill every worker in turn, and each one restarted,
  // until its deadline. Past the limit the batch is split like a failing one, until the input
  // that does it is alone and its caller alone gets the error.
  if (++batch->device_faults < kDeviceFaultsToSuspect) {
    dispatch(batch);
    return;
  }
  if (batch->size() > 1) {
    Batch* half = acquire_extra();
    batch->split_into(*half);
    dispatch(batch);
    dispatch(half);
    return;
  }
  batch->last_error = fmt::format("the worker running this input went away {} times (it crashed, hung or broke "
                                  "the protocol); last: {}",
                                  batch->device_faults, batch->last_error);
  complete_single_failure(batch, device, false);
}

void Router::hold_for_device(Batch* batch, std::int64_t /*now_ns*/) noexcept {
  batch->held_for_device = true;
  std::lock_guard lock(held_mu_);
  held_.push_back(batch);
}

bool Router::expire_waiting(Batch* batch, std::int64_t now_ns) noexcept {
  const bool any_expired = std::any_of(batch->requests.begin(), batch->requests.end(), [&](const RequestRef& r) {
    const std::int64_t expire = expire_ns(r);
    return expire != 0 && expire <= now_ns;
  });
  if (any_expired) {
    Batch* expired = acquire_extra();
    batch->move_expired_into(*expired, now_ns);
    completer_.complete_batch_with(*expired, shm::WireStatus::kTimeout,
                                   "deadline passed while no device could take the request");
    release(expired);
  }
  if (batch->size() > 0) return true;
  release(batch);
  return false;
}

}  // namespace batchd

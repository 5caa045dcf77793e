#include "daemon/device_health.hpp"

namespace batchd {

const char* device_state_name(DeviceState state) noexcept {
  switch (state) {
    case DeviceState::kHealthy: return "healthy";
    case DeviceState::kUnhealthy: return "unhealthy";
    case DeviceState::kProbing: return "probing";
    case DeviceState::kLost: return "lost";
  }
  return "unknown";
}

bool DeviceHealth::try_begin_probe(std::int64_t now_ns) noexcept {
  if (now_ns < retry_at_ns_.load(std::memory_order_acquire)) return false;
  DeviceState expected = DeviceState::kUnhealthy;
  return state_.compare_exchange_strong(expected, DeviceState::kProbing, std::memory_order_acq_rel);
}

void DeviceHealth::record_success(std::uint64_t items, std::int64_t run_ns, std::int64_t now_ns, bool probe) noexcept {
  const auto sample = static_cast<std::uint64_t>(std::max<std::int64_t>(run_ns, 1));
  const std::uint64_t old = batch_ns_estimate(now_ns);
  const std::uint64_t item_sample = std::max<std::uint64_t>(sample / std::max<std::uint64_t>(items, 1), 1);
  const std::uint64_t item_old = item_ns_estimate(now_ns);
  // Lanes of one device may race here; a lost update only delays the average by one sample.
  batch_ns_.store(old == 0 ? sample : (old * 7 + sample) / 8, std::memory_order_relaxed);
  item_ns_.store(item_old == 0 ? item_sample : (item_old * 7 + item_sample) / 8, std::memory_order_relaxed);
  last_success_ns_.store(now_ns, std::memory_order_relaxed);
  if (probe) {
    probes_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    batches_ok_.fetch_add(1, std::memory_order_relaxed);
    items_ok_.fetch_add(items, std::memory_order_relaxed);
  }
  consecutive_failures_.store(0, std::memory_order_relaxed);
  DeviceState expected = DeviceState::kProbing;
  state_.compare_exchange_strong(expected, DeviceState::kHealthy, std::memory_order_acq_rel);
}

bool DeviceHealth::record_failure(std::int64_t now_ns, bool count_streak) noexcept {
  batches_failed_.fetch_add(1, std::memory_order_relaxed);
  const std::uint32_t streak = consecutive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  // A failed probe, or a streak long enough that the device itself must be the problem.
  if (state() == DeviceState::kProbing || (count_streak && streak >= kFailuresToUnhealthy)) {
    mark_unhealthy(now_ns);
    return true;
  }
  return false;
}

void DeviceHealth::mark_unhealthy(std::int64_t now_ns) noexcept {
  const std::int64_t last = last_marked_ns_.exchange(now_ns, std::memory_order_relaxed);
  std::int64_t backoff = backoff_ns_.load(std::memory_order_relaxed);
  backoff = (backoff == 0 || now_ns - last > policy_.forget_ns) ? policy_.base_ns
                                                                : std::min(backoff * 2, policy_.max_ns);
  backoff_ns_.store(backoff, std::memory_order_relaxed);
  retry_at_ns_.store(now_ns + backoff, std::memory_order_release);
  // A lost device stays lost: no back-off ends that.
  DeviceState s = state();
  do {
    if (s == DeviceState::kLost) return;
  } while (!state_.compare_exchange_weak(s, DeviceState::kUnhealthy, std::memory_order_acq_rel));
  marked_.fetch_add(1, std::memory_order_relaxed);
}

void DeviceHealth::arrive() noexcept {
  state_.store(DeviceState::kHealthy, std::memory_order_relaxed);
  retry_at_ns_.store(0, std::memory_order_relaxed);
  backoff_ns_.store(0, std::memory_order_relaxed);
  consecutive_failures_.store(0, std::memory_order_relaxed);
  batch_ns_.store(0, std::memory_order_relaxed);
  item_ns_.store(0, std::memory_order_relaxed);
  last_success_ns_.store(0, std::memory_order_relaxed);
  const std::uint64_t next = incarnation() + 1;
  presence_.store(next << 1 | 1, std::memory_order_release);
}

bool DeviceHealth::retire(std::uint64_t incarnation) noexcept {
  std::uint64_t expected = incarnation << 1 | 1;
  return presence_.compare_exchange_strong(expected, incarnation << 1, std::memory_order_acq_rel);
}

}  // namespace batchd

// One device's health as the router sees it: healthy, unhealthy until a back-off ends, being
// probed by a single batch after it, or lost for good. Counters for stats. Thread-safe: workers, the watchdog and
// the dispatching thread all touch it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace batchd {

// kLost: the backend reports the device lost for good (Backend::device_lost); it takes no work
// and is never probed again in this process.
enum class DeviceState : std::uint32_t { kHealthy = 0, kUnhealthy = 1, kProbing = 2, kLost = 3 };

const char* device_state_name(DeviceState state) noexcept;

struct BackoffPolicy {
  std::int64_t base_ns = 100'000'000;     // first back-off after a device is marked unhealthy
  std::int64_t max_ns = 5'000'000'000;    // back-offs double up to this
  std::int64_t forget_ns = 10'000'000'000;  // healthy this long: the next back-off starts at base
};

class DeviceHealth {
 public:
  // Consecutive failed batches that mark a device unhealthy when nothing better can tell a
  // broken device from bad inputs (see Router's canary).
  static constexpr std::uint32_t kFailuresToUnhealthy = 3;

  [[nodiscard]] DeviceState state() const noexcept {
    return state_.load(std::memory_order_acquire);
  }

  // Whether a batch may go here now: healthy, or unhealthy with its back-off over and no probe
  // in flight. Does not claim the probe: see try_begin_probe().
  [[nodiscard]] bool available(std::int64_t now_ns) const noexcept {
    if (!present()) return false;
    const DeviceState s = state();
    return s == DeviceState::kHealthy ||
           (s == DeviceState::kUnhealthy && now_ns >= retry_at_ns_.load(std::memory_order_acquire));
  }

  // Claims the one probe of a device whose back-off is over; false if healthy (no probe needed
  // and none claimed) or someone else claimed it.
  bool try_begin_probe(std::int64_t now_ns) noexcept;

  // A batch of `items` succeeded here in `run_ns`, finishing at now_ns: healthy again (ending a
  // probe), failure streak reset, speed estimate updated.
  // A probe (Batch::shadow) updates the estimates and health alike, but counts as a probe, not
  // as requests served.
  void record_success(std::uint64_t items, std::int64_t run_ns, std::int64_t now_ns, bool probe = false) noexcept;
  // Measured run time of a batch here (moving average). 0 while unmeasured, and again once the
  // last success is older than kStaleNs, so that a device that once looked slow is tried again
  // rather than starved of the work that would correct its estimate.
  [[nodiscard]] std::uint64_t batch_ns_estimate(std::int64_t now_ns) const noexcept {
    if (now_ns - last_success_ns_.load(std::memory_order_relaxed) > kStaleNs) return 0;
    return batch_ns_.load(std::memory_order_relaxed);
  }
  static constexpr std::int64_t kStaleNs = 1'000'000'000;
  // The device is no longer what was measured (a probe ran far faster than its estimate): the
  // next success starts the averages afresh.
  void forget_speed() noexcept {
    batch_ns_.store(0, std::memory_order_relaxed);
    item_ns_.store(0, std::memory_order_relaxed);
  }
  // The moving average as last measured, stale or not (0: never measured): what status shows.
  [[nodiscard]] std::uint64_t measured_batch_ns() const noexcept { return batch_ns_.load(std::memory_order_relaxed); }
  // When its last batch succeeded (0: none yet).
  [[nodiscard]] std::int64_t last_success_ns() const noexcept { return last_success_ns_.load(std::memory_order_relaxed); }
  // Measured run time per request (moving average over batches), with the same staleness.
  [[nodiscard]] std::uint64_t item_ns_estimate(std::int64_t now_ns) const noexcept {
    if (now_ns - last_success_ns_.load(std::memory_order_relaxed) > kStaleNs) return 0;
    return item_ns_.load(std::memory_order_relaxed);
  }
  // A batch failed here. With `count_streak` (the router has no known-good input to test the
  // device with), a long enough streak of failures marks it unhealthy. Returns whether the
  // device became unhealthy.
  bool record_failure(std::int64_t now_ns, bool count_streak) noexcept;
  // Marks the device unhealthy now (proven at fault, or timed out) with a growing back-off.
  void mark_unhealthy(std::int64_t now_ns) noexcept;
  // The backend lost the device for good; returns whether it was not lost before.
  bool mark_lost() noexcept {
    return state_.exchange(DeviceState::kLost, std::memory_order_acq_rel) != DeviceState::kLost;
  }
  // A failure turned out to be the input's, not the device's.
  void forgive() noexcept { consecutive_failures_.store(0, std::memory_order_relaxed); }

  // Devices that come and go (worker processes): whether one is in this place now. Each arrival
  // is a new incarnation, so a lane that saw the old one go cannot retire the new one.
  [[nodiscard]] bool present() const noexcept { return (presence_.load(std::memory_order_acquire) & 1) != 0; }
  [[nodiscard]] std::uint64_t incarnation() const noexcept {
    return presence_.load(std::memory_order_acquire) >> 1;
  }
  // A new device arrives here: healthy, nothing measured, no failure streak (the counters stay,
  // as totals of the place).
  void arrive() noexcept;
  // The device of `incarnation` is gone (absent until the next arrive()); false if another
  // incarnation is here by now.
  bool retire(std::uint64_t incarnation) noexcept;

  void set_backoff(const BackoffPolicy& policy) noexcept { policy_ = policy; }
  void record_timeout() noexcept { timeouts_.fetch_add(1, std::memory_order_relaxed); }
  // A batch ran on the drain thread rather than a lane's worker (Router::run_or_dispatch).
  void record_inline() noexcept { batches_inline_.fetch_add(1, std::memory_order_relaxed); }

  [[nodiscard]] std::uint64_t batches_ok() const noexcept { return batches_ok_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t batches_failed() const noexcept { return batches_failed_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t items_ok() const noexcept { return items_ok_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t probes_ok() const noexcept { return probes_ok_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t batches_inline() const noexcept { return batches_inline_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t timeouts() const noexcept { return timeouts_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t times_marked_unhealthy() const noexcept { return marked_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t retry_at_ns() const noexcept { return retry_at_ns_.load(std::memory_order_relaxed); }

  // Work dispatched here and not yet finished: the router's load measure.
  std::atomic<std::uint64_t> outstanding_items{0};
  std::atomic<std::uint64_t> outstanding_batches{0};

 private:
  BackoffPolicy policy_;
  std::atomic<std::uint64_t> presence_{1};  // incarnation << 1 | present
  std::atomic<DeviceState> state_{DeviceState::kHealthy};
  std::atomic<std::int64_t> retry_at_ns_{0};
  std::atomic<std::int64_t> backoff_ns_{0};
  std::atomic<std::int64_t> last_marked_ns_{0};
  std::atomic<std::uint32_t> consecutive_failures_{0};
  std::atomic<std::uint64_t> batches_ok_{0};
  std::atomic<std::uint64_t> batches_failed_{0};
  std::atomic<std::uint64_t> items_ok_{0};
  std::atomic<std::uint64_t> batches_inline_{0};
  std::atomic<std::uint64_t> probes_ok_{0};
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> marked_{0};
  std::atomic<std::uint64_t> batch_ns_{0};
  std::atomic<std::uint64_t> item_ns_{0};
  std::atomic<std::int64_t> last_success_ns_{0};
};

}  // namespace batchd

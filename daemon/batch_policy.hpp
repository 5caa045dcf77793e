// When to flush the open batch. Two rules:
// - fixed: wait-or-full, exactly as the seed had it: flush at max_batch requests (or the byte
//   budget), or once the oldest request has waited max_wait;
// - adaptive (the default): flush when waiting longer no longer pays, from the devices' fitted
//   cost (CostModel), the arrival rate (RateMeter) and which device lanes are idle. The rule and
//   its derivation are in docs/POLICY.md; in short, with L lanes, arrivals at rate r and a batch
//   of n costing a + b n on a lane:
//     - full (max_batch or the byte budget): flush;
//     - no lane idle: hold the batch (it grows for free while it would only queue); it is
//       reconsidered when a lane frees;
//     - a lane idle: flush once the batch holds n* = ceil(r a / (u L - r b)), the smallest batch
//       that keeps the lanes below utilisation u = kTargetUtilization, or once the oldest request
//       has waited the (n* - 1) / r that n* should have taken to arrive, or one fixed cost a (a
//       lane never idles longer than a batch can save). n* <= 1 (fewer than about one arrival per
//       fixed cost) flushes at once: a lone request pays one batch time, not a timer. Where no
//       batch size keeps up (u L <= r b), n* is max_batch: the biggest batches carry the most.
//       And no later than max_wait after the oldest arrived (a ceiling on waiting for a batch to
//       fill), or than the earliest deadline in the batch minus its predicted run time and a
//       margin.
//     - a burst: r is the smoothed rate (RateMeter, 250 ms), which lags a jump. The waiting
//       requests' own rate (their count since the oldest) is evidence it cannot give; where it is
//       higher and asks for bigger batches, n* is the batch that keeps up with it at full
//       utilisation (kBurstUtilization), and a lane that frees takes at most that many, or the
//       knee a / b, rather than the whole backlog (take_limit): one long batch would keep its first
//       requests for its whole run while the other lanes free with little to take.
//     - a batch the drain thread would run itself, while the rings hold more that its next pass
//       takes at once, of a model whose arrivals bring a quarter of kBacklogFill within
//       kBacklogHoldNs: held up to kBacklogFill requests (or kBacklogHoldNs, or the time the
//       fill should take at its rate). Flushed now, it runs
//       on the very thread that would take those requests, so it answers nobody sooner by more
//       than a pass and costs the daemon a batch's overhead per pass; with many models sharing
//       the drain thread, each pass brings each model only a few.
// Pure functions of their arguments (time included), so tests hand-compute decisions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "daemon/batcher.hpp"
#include "daemon/cost_model.hpp"
#include "shm/status_page.hpp"

namespace batchd {

// What the open batch holds.
struct OpenBatchState {
  std::uint32_t count = 0;
  std::uint64_t bytes = 0;
  bool full = false;                     // a request was turned away for the byte budget
  std::int64_t oldest_ns = 0;            // arrival of the oldest request
  std::int64_t earliest_deadline_ns = 0;  // the soonest deadline among them; 0: none has one
};

// What the policy sees of the rest of the daemon at a decision.
struct PolicyView {
  unsigned lanes = 0;        // device lanes on available devices
  unsigned idle_lanes = 0;   // of them, running nothing and with nothing queued
  double arrivals_per_s = 0;
  double mean_input_bytes = 0;
  CostFit cost;              // a lane's batch cost (the available devices' mean)
  std::int64_t last_batch_end_ns = 0;  // the latest a batch succeeded on one of the lanes
  // The last drain pass left requests on a client's ring (the next pass takes them at once), and
  // a batch of kBacklogFill would run on the drain thread itself (Router::would_run_inline).
  bool drain_backlog = false;
  bool runs_on_drain_thread = false;
};

enum class FlushReason : std::uint8_t {
  kHold,       // not yet
  kFull,       // max_batch or the byte budget
  kMaxWait,    // the oldest waited max_wait (the fixed rule's timer; the adaptive ceiling)
  kDeadline,   // waiting longer would make the earliest deadline unreachable
  kTarget,     // a lane is idle and the batch reached n*
  kFillTime,   // a lane is idle and n* did not arrive in the time it should have
  kNoDevice,   // nothing can run it: let the router answer at once
  kStopping,   // the daemon is stopping: what is open runs now
};

// Counted per reason in the status page, in this order.
static_assert(static_cast<std::size_t>(FlushReason::kStopping) + 1 == shm::kFlushReasons);

// n* for one decision, and the arrival rate it came from.
struct BatchTarget {
  std::uint32_t size = 1;
  double rate = 0;
  bool burst = false;  // from the waiting requests' own rate, above the smoothed one
};

struct FlushDecision {
  FlushReason reason = FlushReason::kHold;
  // While holding: when to decide again even if nothing happens (0: only on an event, that is an
  // arrival or a lane freeing up).
  std::int64_t recheck_ns = 0;

  [[nodiscard]] bool flush() const noexcept { return reason != FlushReason::kHold; }
};

const char* policy_name(PolicyKind kind) noexcept;
std::optional<PolicyKind> parse_policy(std::string_view name) noexcept;
const char* flush_reason_name(FlushReason reason) noexcept;

class BatchPolicy {
 public:
  // The lanes' utilisation the adaptive batch size aims at: below 1 leaves room for bursts (a
  // queue grows without bound as utilisation nears 1), and when it is exceeded anyway the lanes
  // are busy and the batch grows while it is held.
  static constexpr double kTargetUtilization = 0.9;
  // ... and during a burst the smoothed rate has not caught up with: the smallest batch that
  // keeps up with it (target_for).
  static constexpr double kBurstUtilization = 1.0;
  // Kept free before a deadline besides the predicted run time: completion and wake-up costs.
  static constexpr std::int64_t kDeadlineMarginNs = 200'000;
  // While every lane is busy the batch waits for a lane's worker to wake the drain loop; this is
  // only a safety net for that wake-up.
  static constexpr std::int64_t kHeldRecheckNs = 5'000'000;
  // take_limit applies only where a batch's fixed cost is a device's, well above what the daemon
  // spends on a batch itself (tens of microseconds): below it, smaller batches cost the daemon
  // more than their runs save (the cpu backend's microsecond batches).
  static constexpr std::int64_t kTakeLimitMinFixedNs = 200'000;
  // The batch the drain thread's backlog fills before it runs it, and the longest it waits.
  static constexpr std::uint32_t kBacklogFill = 32;
  static constexpr std::int64_t kBacklogHoldNs = 250'000;

  explicit BatchPolicy(const BatchLimits& limits) noexcept : limits_(limits) {}
  void set_limits(const BatchLimits& limits) noexcept { limits_ = limits; }
  [[nodiscard]] const BatchLimits& limits() const noexcept { return limits_; }

  [[nodiscard]] FlushDecision decide(const OpenBatchState& batch, const PolicyView& view,
                                     std::int64_t now_ns) const noexcept;

  // n* at the smoothed arrival rate, in [1, max_batch].
  [[nodiscard]] std::uint32_t target_batch(const PolicyView& view) const noexcept;
  // n* for the requests waiting (the open batch, or it and those queued behind it): at the
  // smoothed rate, or at their own where they show a burst that needs bigger batches.
  [[nodiscard]] BatchTarget target_for(const OpenBatchState& waiting, const PolicyView& view,
                                       std::int64_t now_ns) const noexcept;
  // The most requests a batch takes of those waiting: max_batch, but in a burst what keeps the
  // lanes up with it or the knee (knee_batch), whichever is larger.
  [[nodiscard]] std::uint32_t take_limit(const OpenBatchState& waiting, const PolicyView& view,
                                         std::int64_t now_ns) const noexcept;
  // The rate the waiting requests arrived at: their count since the oldest, plus one mean gap
  // at the smoothed rate (0 without one).
  [[nodiscard]] static double recent_rate(const OpenBatchState& waiting, const PolicyView& view,
                                          std::int64_t now_ns) noexcept;
  // The smallest batch that keeps the lanes at or below utilisation u at `rate` (unclamped;
  // infinity where none does), and the batch whose per-request work equals its fixed cost.
  [[nodiscard]] static double keep_up_batch(const PolicyView& view, double rate, double u) noexcept;
  [[nodiscard]] static double knee_batch(const PolicyView& view) noexcept;

 private:
  // max_batch, or fewer where the inputs' mean size would pass the byte budget first.
  [[nodiscard]] double batch_ceiling(const PolicyView& view) const noexcept;
  [[nodiscard]] FlushDecision decide_fixed(const OpenBatchState& batch, std::int64_t now_ns) const noexcept;
  [[nodiscard]] FlushDecision decide_adaptive(const OpenBatchState& batch, const PolicyView& view,
                                              std::int64_t now_ns) const noexcept;

  BatchLimits limits_;
};

}  // namespace batchd

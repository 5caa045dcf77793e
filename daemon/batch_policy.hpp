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
//     - a lane idle: flush once the batch holds n* = ceil(r a / (u L - r b)) requests, the
//       smallest batch that keeps the lanes below utilisation u = kTargetUtilization, or once the
//       oldest request has waited the (n* - 1) / r that n* should have taken to arrive. n* <= 1
//       (fewer than about one arrival per fixed cost) flushes at once: a lone request pays one
//       batch time, not a timer; so does u L <= r b (no batch size keeps up: every idle moment of
//       a lane is lost capacity). And no later than max_wait after the oldest arrived (a ceiling
//       on waiting for a batch to fill), or than the earliest deadline in the batch minus its
//       predicted run time and a margin.
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
  // Kept free before a deadline besides the predicted run time: completion and wake-up costs.
  static constexpr std::int64_t kDeadlineMarginNs = 200'000;
  // While every lane is busy the batch waits for a lane's worker to wake the drain loop; this is
  // only a safety net for that wake-up.
  static constexpr std::int64_t kHeldRecheckNs = 5'000'000;
  // The batch the drain thread's backlog fills before it runs it, and the longest it waits.
  static constexpr std::uint32_t kBacklogFill = 32;
  static constexpr std::int64_t kBacklogHoldNs = 250'000;

  explicit BatchPolicy(const BatchLimits& limits) noexcept : limits_(limits) {}
  void set_limits(const BatchLimits& limits) noexcept { limits_ = limits; }
  [[nodiscard]] const BatchLimits& limits() const noexcept { return limits_; }

  [[nodiscard]] FlushDecision decide(const OpenBatchState& batch, const PolicyView& view,
                                     std::int64_t now_ns) const noexcept;

  // n*: the adaptive batch size for this view, in [1, max_batch].
  [[nodiscard]] std::uint32_t target_batch(const PolicyView& view) const noexcept;

 private:
  [[nodiscard]] FlushDecision decide_fixed(const OpenBatchState& batch, std::int64_t now_ns) const noexcept;
  [[nodiscard]] FlushDecision decide_adaptive(const OpenBatchState& batch, const PolicyView& view,
                                              std::int64_t now_ns) const noexcept;

  BatchLimits limits_;
};

}  // namespace batchd

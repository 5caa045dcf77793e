#include "daemon/batch_policy.hpp"

#include <algorithm>
#include <cmath>

namespace batchd {

const char* policy_name(PolicyKind kind) noexcept {
  switch (kind) {
    case PolicyKind::kFixed: return "fixed";
    case PolicyKind::kAdaptive: return "adaptive";
  }
  return "unknown";
}

std::optional<PolicyKind> parse_policy(std::string_view name) noexcept {
  if (name == "fixed") return PolicyKind::kFixed;
  if (name == "adaptive") return PolicyKind::kAdaptive;
  return std::nullopt;
}

const char* flush_reason_name(FlushReason reason) noexcept {
  switch (reason) {
    case FlushReason::kHold: return "hold";
    case FlushReason::kFull: return "full";
    case FlushReason::kMaxWait: return "max_wait";
    case FlushReason::kDeadline: return "deadline";
    case FlushReason::kTarget: return "target";
    case FlushReason::kFillTime: return "fill_time";
    case FlushReason::kNoDevice: return "no_device";
    case FlushReason::kStopping: return "stopping";
  }
  return "unknown";
}

namespace {

FlushDecision hold(std::int64_t recheck_ns) noexcept { return {FlushReason::kHold, recheck_ns}; }
FlushDecision flush(FlushReason reason) noexcept { return {reason, 0}; }

}  // namespace

FlushDecision BatchPolicy::decide(const OpenBatchState& batch, const PolicyView& view,
                                  std::int64_t now_ns) const noexcept {
  if (batch.count == 0) return hold(0);
  if (batch.full || batch.count >= limits_.max_batch || batch.bytes >= limits_.max_batch_bytes) {
    return flush(FlushReason::kFull);
  }
  return limits_.policy == PolicyKind::kFixed ? decide_fixed(batch, now_ns)
                                              : decide_adaptive(batch, view, now_ns);
}

FlushDecision BatchPolicy::decide_fixed(const OpenBatchState& batch, std::int64_t now_ns) const noexcept {
  const std::int64_t due_ns = batch.oldest_ns + limits_.max_wait.count();
  return now_ns >= due_ns ? flush(FlushReason::kMaxWait) : hold(due_ns);
}

FlushDecision BatchPolicy::decide_adaptive(const OpenBatchState& batch, const PolicyView& view,
                                           std::int64_t now_ns) const noexcept {
  if (view.lanes == 0) return flush(FlushReason::kNoDevice);
  // Every lane busy: flushed now, the batch would only queue behind a running one, fixed at its
  // size and members; held, it keeps taking arrivals (in class order) until a lane frees, which
  // wakes the drain loop. Neither the ceiling nor a deadline is helped by queueing it sooner.
  if (view.idle_lanes == 0) return hold(now_ns + kHeldRecheckNs);
  std::int64_t recheck_ns = batch.oldest_ns + limits_.max_wait.count();
  if (now_ns >= recheck_ns) return flush(FlushReason::kMaxWait);
  if (batch.earliest_deadline_ns != 0) {
    const double run_ns = view.cost.fitted ? view.cost.predict_ns(batch.count, static_cast<double>(batch.bytes)) : 0;
    const auto reserve_ns = static_cast<std::int64_t>(run_ns + run_ns / 4) + kDeadlineMarginNs;
    const std::int64_t latest_ns = batch.earliest_deadline_ns - reserve_ns;
    if (now_ns >= latest_ns) return flush(FlushReason::kDeadline);
    recheck_ns = std::min(recheck_ns, latest_ns);
  }
  const std::uint32_t fill = std::min(kBacklogFill, limits_.max_batch);
  // Only for a model whose own arrivals bring a quarter of the fill within the hold: a light
  // model beside another's flood has a backlog too, and its lone request would wait for nothing.
  if (view.drain_backlog && view.runs_on_drain_thread && batch.count < fill &&
      view.arrivals_per_s * static_cast<double>(kBacklogHoldNs) / 1e9 >= fill / 4.0) {
    const auto fill_ns = static_cast<std::int64_t>(static_cast<double>(fill - 1) * 1e9 / view.arrivals_per_s);
    const std::int64_t until_ns = batch.oldest_ns + std::min(kBacklogHoldNs, fill_ns);
    if (now_ns < until_ns) return hold(std::min(recheck_ns, until_ns));
  }
  const std::uint32_t target = target_batch(view);
  if (batch.count >= target) return flush(FlushReason::kTarget);
  // target > 1 implies a positive rate. Past the time n* should have taken to arrive, the rate
  // was an overestimate (or the burst is over): waiting on would be paid by those already here.
  const auto fill_ns = static_cast<std::int64_t>(static_cast<double>(target - 1) * 1e9 / view.arrivals_per_s);
  const std::int64_t fill_by_ns = batch.oldest_ns + fill_ns;
  if (now_ns >= fill_by_ns) return flush(FlushReason::kFillTime);
  return hold(std::min(recheck_ns, fill_by_ns));
}

std::uint32_t BatchPolicy::target_batch(const PolicyView& view) const noexcept {
  if (!view.cost.fitted || view.arrivals_per_s <= 0 || view.lanes == 0) return 1;
  const double rate_per_ns = view.arrivals_per_s / 1e9;
  const double per_request_ns = view.cost.per_item_ns + view.cost.per_byte_ns * view.mean_input_bytes;
  // Lane utilisation with batches of n: rate x (a + b n) / (L n) <= u  <=>  n >= rate a / (u L - rate b).
  const double spare = kTargetUtilization * view.lanes - rate_per_ns * per_request_ns;
  double ceiling = limits_.max_batch;
  if (view.mean_input_bytes > 0) {
    ceiling = std::min(ceiling, std::max(1.0, std::floor(static_cast<double>(limits_.max_batch_bytes) /
                                                         view.mean_input_bytes)));
  }
  // No batch size keeps the lanes below u: the load exceeds what they can carry, and a lane that
  // waits for a batch to fill only loses capacity. Flush whenever a lane is idle; the batches are
  // big anyway, since every lane stays busy and the held batch grows meanwhile.
  if (spare <= 0) return 1;
  const double n = std::ceil(rate_per_ns * view.cost.fixed_ns / spare);
  return static_cast<std::uint32_t>(std::clamp(n, 1.0, ceiling));
}

}  // namespace batchd

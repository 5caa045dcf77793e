#include "daemon/batch_policy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

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

// A typical request's share of a batch's cost: per request, and per byte at the mean input size.
double per_request_ns(const PolicyView& view) noexcept {
  return view.cost.per_item_ns + view.cost.per_byte_ns * view.mean_input_bytes;
}

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
  const BatchTarget target = target_for(batch, view, now_ns);
  if (batch.count >= target.size) return flush(FlushReason::kTarget);
  // target > 1 implies a positive rate. Past the time n* should have taken to arrive, the rate
  // was an overestimate (or the burst is over): waiting on would be paid by those already here.
  // Nor does a lane wait longer than one batch's fixed cost: a batch saves at most that, so an
  // idle lane that waits longer has lost more capacity than it can win back (as renting skis
  // beats buying them until the rent paid reaches the price).
  auto fill_ns = static_cast<std::int64_t>(static_cast<double>(target.size - 1) * 1e9 / target.rate);
  if (view.cost.fitted) fill_ns = std::min(fill_ns, static_cast<std::int64_t>(view.cost.fixed_ns));
  const std::int64_t fill_by_ns = batch.oldest_ns + fill_ns;
  if (now_ns >= fill_by_ns) return flush(FlushReason::kFillTime);
  return hold(std::min(recheck_ns, fill_by_ns));
}

double BatchPolicy::recent_rate(const OpenBatchState& batch, const PolicyView& view, std::int64_t now_ns) noexcept {
  if (view.arrivals_per_s <= 0 || batch.count == 0) return 0;
  // Every request waiting arrived since the oldest: their count over that time, plus one mean gap
  // at the smoothed rate, so that a few arriving together (one drain pass) do not read as a flood.
  const double span_s = static_cast<double>(std::max<std::int64_t>(now_ns - batch.oldest_ns, 0)) / 1e9;
  const double gap_s = 1 / view.arrivals_per_s;
  // Requests that arrive together within a fixed cost of a batch's end are as likely its callers
  // coming back (a closed loop: k callers send k at once, every time) as a burst: they count only
  // once they have waited a mean gap, which a burst fills and a closed loop does not.
  if (span_s < gap_s && batch.oldest_ns - view.last_batch_end_ns < static_cast<std::int64_t>(view.cost.fixed_ns)) {
    return 0;
  }
  return static_cast<double>(batch.count) / (span_s + gap_s);
}

BatchTarget BatchPolicy::target_for(const OpenBatchState& waiting, const PolicyView& view,
                                    std::int64_t now_ns) const noexcept {
  BatchTarget target{target_batch(view), view.arrivals_per_s, false};
  const double recent = recent_rate(waiting, view, now_ns);
  if (recent <= view.arrivals_per_s || !view.cost.fitted) return target;
  // A burst the smoothed rate has not caught up with: batches that keep the lanes up with it at
  // full utilisation. The slack kTargetUtilization keeps is for a load that lasts; a burst's
  // backlog drains after it, and waiting longer for a bigger batch would only add to it.
  const double n = keep_up_batch(view, recent, kBurstUtilization);
  const double ceiling = batch_ceiling(view);
  const auto size = static_cast<std::uint32_t>(std::clamp(std::ceil(n), 1.0, ceiling));
  if (size > target.size) target = {size, recent, true};
  return target;
}

std::uint32_t BatchPolicy::take_limit(const OpenBatchState& waiting, const PolicyView& view,
                                      std::int64_t now_ns) const noexcept {
  if (limits_.policy != PolicyKind::kAdaptive || view.lanes == 0) return limits_.max_batch;
  if (view.cost.fixed_ns < kTakeLimitMinFixedNs) return limits_.max_batch;
  const BatchTarget target = target_for(waiting, view, now_ns);
  if (!target.burst) return limits_.max_batch;
  // A lane freeing in a burst takes what keeps the lanes up with it, or the knee, whichever is
  // larger, and leaves the rest to the next lane to free: all of it would make one long batch
  // whose first requests wait for its whole run, while the other lanes free with little to take.
  // Where nothing keeps up, a lasting load (the smoothed rate) takes everything for throughput;
  // a burst takes the knee, and its backlog drains after it.
  const double n = keep_up_batch(view, target.rate, kBurstUtilization);
  const double ceiling = batch_ceiling(view);
  const double take = std::clamp(std::max(n < ceiling ? std::ceil(n) : 0, knee_batch(view)), 1.0, ceiling);
  return static_cast<std::uint32_t>(take);
}

double BatchPolicy::keep_up_batch(const PolicyView& view, double rate, double u) noexcept {
  // Lane utilisation with batches of n: rate x (a + b n) / (L n) <= u  <=>  n >= rate a / (u L - rate b).
  // Without a fixed cost, no batch size carries more than another.
  if (view.cost.fixed_ns <= 0) return 0;
  const double rate_per_ns = rate / 1e9;
  const double spare = u * view.lanes - rate_per_ns * per_request_ns(view);
  if (spare <= 0) return std::numeric_limits<double>::infinity();
  return rate_per_ns * view.cost.fixed_ns / spare;
}

double BatchPolicy::knee_batch(const PolicyView& view) noexcept {
  // Where a batch's work per request adds up to its fixed cost: up to it a batch twice as big
  // carries nearly twice as much (4/3 at the knee); past it, a bigger batch mostly makes every
  // request in it wait for a longer run.
  const double per_request = per_request_ns(view);
  if (per_request <= 0) return std::numeric_limits<double>::infinity();
  return std::ceil(view.cost.fixed_ns / per_request);
}

double BatchPolicy::batch_ceiling(const PolicyView& view) const noexcept {
  double ceiling = limits_.max_batch;
  if (view.mean_input_bytes > 0) {
    ceiling = std::min(ceiling, std::max(1.0, std::floor(static_cast<double>(limits_.max_batch_bytes) /
                                                         view.mean_input_bytes)));
  }
  return ceiling;
}

std::uint32_t BatchPolicy::target_batch(const PolicyView& view) const noexcept {
  // Without a fixed cost there is nothing to share out: every request may go at once.
  if (!view.cost.fitted || view.cost.fixed_ns <= 0 || view.arrivals_per_s <= 0 || view.lanes == 0) return 1;
  const double ceiling = batch_ceiling(view);
  // No batch size keeps the lanes below u: the load exceeds what they can carry, and the biggest
  // batches carry the most. A lane still waits no longer than a fixed cost for one to fill, and
  // while every lane is busy the held batch grows anyway.
  const double n = keep_up_batch(view, view.arrivals_per_s, kTargetUtilization);
  return static_cast<std::uint32_t>(std::clamp(std::ceil(n), 1.0, ceiling));
}

}  // namespace batchd

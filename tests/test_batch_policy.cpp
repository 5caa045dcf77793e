// The flush rules' decisions on hand-computed cases (docs/POLICY.md has the algebra). Cost and
// clock are handed in: 2 ms + 20 us per request on 2 lanes unless a case says otherwise.
#include <doctest/doctest.h>

#include "daemon/batch_policy.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t kT0 = 1'000'000'000;  // the oldest request's arrival
constexpr std::int64_t kMs = 1'000'000;

BatchLimits adaptive_limits() {
  BatchLimits limits;
  limits.policy = PolicyKind::kAdaptive;
  limits.max_batch = 256;
  limits.max_wait = 50ms;
  limits.max_batch_bytes = 8U << 20;
  return limits;
}

CostFit gpu_like() {
  CostFit cost;
  cost.fixed_ns = 2'000'000;
  cost.per_item_ns = 20'000;
  cost.samples = 100;
  cost.fitted = true;
  return cost;
}

PolicyView view(double per_second, unsigned idle_lanes = 1) {
  PolicyView v;
  v.lanes = 2;
  v.idle_lanes = idle_lanes;
  v.arrivals_per_s = per_second;
  v.mean_input_bytes = 40;
  v.cost = gpu_like();
  return v;
}

OpenBatchState batch(std::uint32_t count, std::int64_t deadline_ns = 0) {
  return {count, count * 40ULL, false, kT0, deadline_ns};
}

}  // namespace

TEST_CASE("fixed: full, or the oldest waited max_wait, as the seed's rule") {
  BatchLimits limits;
  limits.policy = PolicyKind::kFixed;
  limits.max_batch = 64;
  limits.max_wait = 50ms;
  const BatchPolicy policy(limits);
  FlushDecision d = policy.decide(batch(10), view(1e6), kT0 + 49 * kMs);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == kT0 + 50 * kMs);  // ignores the idle lane and the rate
  CHECK(policy.decide(batch(10), view(1e6), kT0 + 50 * kMs).reason == FlushReason::kMaxWait);
  CHECK(policy.decide(batch(64), view(1), kT0).reason == FlushReason::kFull);
  OpenBatchState turned_away = batch(3);
  turned_away.full = true;
  CHECK(policy.decide(turned_away, view(1), kT0).reason == FlushReason::kFull);
  CHECK_FALSE(policy.decide(batch(0), view(1), kT0 + 100 * kMs).flush());
}

TEST_CASE("adaptive: n* from the utilisation target") {
  const BatchPolicy policy(adaptive_limits());
  // n* = ceil(r a / (u L - r b)) with r = 19,512/s, a = 2 ms, b = 20 us + 0 per byte, L = 2,
  // u = 0.9: 39.024 / (1.8 - 0.39024) = 27.68 -> 28.
  CHECK(BatchPolicy::kTargetUtilization == 0.9);
  CHECK(policy.target_batch(view(19'512)) == 28);
  // Fewer than one arrival per fixed cost: 100/s x 2 ms = 0.2 -> n* = 1, flush at once.
  CHECK(policy.target_batch(view(100)) == 1);
  // No batch size keeps up (r b = 2 > u L = 1.8): the biggest batches carry the most (a lane
  // still waits at most one fixed cost for one: the next case).
  CHECK(policy.target_batch(view(100'000)) == 256);
  // n* is cut to the byte budget: 8 MiB / 1 MiB inputs = 8 < 28.
  PolicyView big = view(19'512);
  big.mean_input_bytes = 1 << 20;
  CHECK(policy.target_batch(big) == 8);
  // Unmeasured devices: no known fixed cost, nothing to wait for.
  PolicyView unmeasured = view(19'512);
  unmeasured.cost.fitted = false;
  CHECK(policy.target_batch(unmeasured) == 1);
}

TEST_CASE("adaptive: a lone request on an idle device goes at once") {
  const BatchPolicy policy(adaptive_limits());
  CHECK(policy.decide(batch(1), view(100), kT0).reason == FlushReason::kTarget);
  PolicyView unmeasured = view(19'512);
  unmeasured.cost.fitted = false;
  CHECK(policy.decide(batch(1), unmeasured, kT0).reason == FlushReason::kTarget);
}

TEST_CASE("adaptive: with a lane idle, wait for n* or for the time n* should take to arrive") {
  const BatchPolicy policy(adaptive_limits());
  // n* = 28 at 19,512/s: 27 more arrivals take 27 / 19,512 s = 1.3838 ms after the oldest.
  const std::int64_t fill_by = kT0 + static_cast<std::int64_t>(27 * 1e9 / 19'512);
  FlushDecision d = policy.decide(batch(10), view(19'512), kT0 + kMs / 2);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == fill_by);
  CHECK(policy.decide(batch(10), view(19'512), fill_by).reason == FlushReason::kFillTime);
  // 28 over the 1.38 ms they take at 19,512/s: no burst, n* reached.
  CHECK(policy.decide(batch(28), view(19'512), fill_by).reason == FlushReason::kTarget);
  // Where n* takes longer than a fixed cost to arrive, the lane waits one fixed cost (2 ms): at
  // 35,000/s n* = ceil(70 / (1.8 - 0.7)) = 64, which takes 1.8 ms; past u L <= r b, n* = 256.
  CHECK(policy.target_batch(view(35'000)) == 64);
  CHECK(policy.decide(batch(1), view(35'000), kT0).recheck_ns == kT0 + static_cast<std::int64_t>(63 * 1e9 / 35'000));
  CHECK(policy.decide(batch(1), view(100'000), kT0).recheck_ns == kT0 + 2 * kMs);
  CHECK(policy.decide(batch(150), view(100'000), kT0 + 2 * kMs).reason == FlushReason::kFillTime);
}

TEST_CASE("adaptive: the waiting requests' own rate shows a burst the smoothed rate lags") {
  const BatchPolicy policy(adaptive_limits());
  // Their count since the oldest, plus one mean gap at the smoothed rate: 30 in 0.4 ms at a
  // smoothed 10,000/s is 30 / (0.4 + 0.1) ms = 60,000/s.
  CHECK(BatchPolicy::recent_rate(batch(30), view(10'000), kT0 + 400'000) == doctest::Approx(60'000));
  // Ten in one drain pass read as 10 / 0.1 ms = 100,000/s, not as infinitely many.
  CHECK(BatchPolicy::recent_rate(batch(10), view(10'000), kT0) == doctest::Approx(100'000));
  CHECK(BatchPolicy::recent_rate(batch(10), view(0), kT0) == 0);
  // At 60,000/s the lanes keep up, at full utilisation, with batches of
  // ceil(120 / (2 - 1.2)) = 150: the burst's n*, above the smoothed rate's ceil(20 / 1.6) = 13.
  CHECK(policy.target_batch(view(10'000)) == 13);
  const BatchTarget burst = policy.target_for(batch(30), view(10'000), kT0 + 400'000);
  CHECK(burst.burst);
  CHECK(burst.size == 150);
  CHECK(burst.rate == doctest::Approx(60'000));
  // Arrivals at the smoothed rate are no burst: 10 in 0.9 ms at 10,000/s is 10,000/s.
  CHECK_FALSE(policy.target_for(batch(10), view(10'000), kT0 + 900'000).burst);
}

TEST_CASE("adaptive: a burst's first requests wait for a batch worth a fixed cost, no more") {
  // Recorded at 90a8fba (bench/shapes.py's burst_1.5x_20ms, batchd --log-level trace): after
  // 80 ms of silence, the first drain pass brought 15 requests within 131 us with the smoothed
  // rate at 10,212/s and both lanes idle; n* was 14 (13 at this file's round cost) and they went
  // as a batch of 15, the next lane's 0.24 ms later as one of 14, and each cost a lane 2.3 ms
  // while 140 more arrived.
  const BatchPolicy policy(adaptive_limits());
  PolicyView lanes = view(10'212, 2);
  CHECK(policy.target_batch(lanes) == 13);
  // Now: 15 / (131 + 97.9) us = 65,524/s; the lanes would keep up with batches of
  // ceil(131.0 / (2 - 1.31)) = 191, which take 2.9 ms to arrive: the batch waits 2 ms.
  const FlushDecision d = policy.decide(batch(15), lanes, kT0 + 131'000);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == kT0 + 2 * kMs);
  // 2 ms on, 120 have come: the rate is still a burst's, the fixed cost is spent, it goes.
  CHECK(policy.decide(batch(120), lanes, kT0 + 2 * kMs).reason == FlushReason::kFillTime);
}

TEST_CASE("adaptive: callers coming back together after a batch are no burst until they wait a mean gap") {
  const BatchPolicy policy(adaptive_limits());
  // A closed loop of 4 callers at 1,600/s: their 4 come back 0.2 ms after the batch that answered
  // them ended. n* at 1,600/s is ceil(3.2 / 1.768) = 2: they go at once, as before bursts were
  // read, rather than waiting for 4 / 0.625 ms = 6,400/s worth of a batch that never comes.
  PolicyView loop = view(1'600, 2);
  loop.last_batch_end_ns = kT0 - 200'000;
  CHECK(BatchPolicy::recent_rate(batch(4), loop, kT0 + 50'000) == 0);
  CHECK(policy.decide(batch(4), loop, kT0 + 50'000).reason == FlushReason::kTarget);
  // Once they have waited a mean gap (0.625 ms), they count: at 0.7 ms, 4 / 1.325 ms = 3,019/s.
  CHECK(BatchPolicy::recent_rate(batch(4), loop, kT0 + 700'000) == doctest::Approx(4 / 0.001325));
  // The same four after 80 ms of quiet are a burst's first pass: 4 / 0.675 ms = 5,926/s asks for
  // ceil(11.85 / (2 - 0.1185)) = 7, and they wait for it.
  PolicyView quiet = loop;
  quiet.last_batch_end_ns = kT0 - 80 * kMs;
  const BatchTarget burst = policy.target_for(batch(4), quiet, kT0 + 50'000);
  CHECK(burst.burst);
  CHECK(burst.size == 7);
  CHECK_FALSE(policy.decide(batch(4), quiet, kT0 + 50'000).flush());
}

TEST_CASE("adaptive: a lane freeing in a burst takes what keeps up with it, not the whole backlog") {
  const BatchPolicy policy(adaptive_limits());
  // 234 arrived in the 4 ms every lane was busy, at a smoothed 12,000/s: 234 / (4 + 0.083) ms =
  // 57,306/s, which the lanes keep up with in batches of ceil(114.6 / (2 - 1.146)) = 135.
  const OpenBatchState backlog = batch(234);
  const std::int64_t now = kT0 + 4 * kMs;
  CHECK(BatchPolicy::recent_rate(backlog, view(12'000), now) == doctest::Approx(234 / (0.004 + 1 / 12'000.0)));
  CHECK(policy.take_limit(backlog, view(12'000), now) == 135);
  // 312 (76,408/s): nothing up to 256 keeps up, and a burst takes the knee, 2 ms / 20 us = 100.
  CHECK(BatchPolicy::knee_batch(view(12'000)) == doctest::Approx(100));
  CHECK(policy.take_limit(batch(312), view(12'000), now) == 100);
  // A load that lasts (the smoothed rate has caught up) takes everything, for throughput.
  CHECK(policy.take_limit(batch(312), view(78'000), now) == 256);
  // Microsecond batches (the cpu backend) take everything: smaller ones cost the daemon more
  // than their runs save.
  PolicyView cheap = view(12'000);
  cheap.cost.fixed_ns = 5'000;
  cheap.cost.per_item_ns = 1'000;
  CHECK(policy.take_limit(batch(312), cheap, now) == 256);
  // The fixed rule never limits what a batch takes below max_batch.
  BatchLimits fixed = adaptive_limits();
  fixed.policy = PolicyKind::kFixed;
  CHECK(BatchPolicy(fixed).take_limit(backlog, view(12'000), now) == 256);
}

TEST_CASE("adaptive: every lane busy, the batch is held until a lane frees, whatever its age") {
  const BatchPolicy policy(adaptive_limits());
  // Flushed, it would only queue behind a running batch; the lane's worker wakes the drain loop
  // when it frees, and the recheck is only a safety net.
  const std::int64_t now = kT0 + 60 * kMs;  // past max_wait
  FlushDecision d = policy.decide(batch(100, kT0 + 61 * kMs), view(19'512, 0), now);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == now + BatchPolicy::kHeldRecheckNs);
  CHECK(policy.decide(batch(256), view(19'512, 0), kT0).reason == FlushReason::kFull);
  // The moment a lane is idle, the ceiling applies.
  CHECK(policy.decide(batch(100), view(19'512, 1), now).reason == FlushReason::kMaxWait);
}

TEST_CASE("adaptive: with a lane idle, no request waits past its deadline minus the predicted run and a margin") {
  const BatchPolicy policy(adaptive_limits());
  // 10 requests: predicted run 2.2 ms; reserved 2.2 + 2.2 / 4 + 0.2 = 2.95 ms before the
  // earliest deadline (oldest + 3 ms): latest flush at oldest + 0.05 ms, before the fill time
  // (oldest + 1.38 ms).
  const std::int64_t deadline = kT0 + 3 * kMs;
  const std::int64_t latest = deadline - 2'950'000;
  FlushDecision d = policy.decide(batch(10, deadline), view(19'512), kT0);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == latest);
  CHECK(policy.decide(batch(10, deadline), view(19'512), latest).reason == FlushReason::kDeadline);
  // A far deadline leaves the fill time in charge (10 in 0.5 ms: no burst at 19,512/s).
  d = policy.decide(batch(10, kT0 + 1000 * kMs), view(19'512), kT0 + kMs / 2);
  CHECK(d.recheck_ns == kT0 + static_cast<std::int64_t>(27 * 1e9 / 19'512));
}

TEST_CASE("adaptive: a batch the drain thread runs itself waits for its backlog, briefly") {
  const BatchPolicy policy(adaptive_limits());
  // The cpu backend at cost 1: n* = 1, so without a backlog every pass flushes what it brought.
  // 200,000/s: 8 in kBacklogHoldNs (a quarter of kBacklogFill); the fill's 31 take 155 us.
  PolicyView cheap = view(200'000);
  cheap.cost.fixed_ns = 0;
  CHECK(policy.decide(batch(4), cheap, kT0).reason == FlushReason::kTarget);
  cheap.drain_backlog = true;
  cheap.runs_on_drain_thread = true;
  // The rings hold more for the next pass: the batch waits for kBacklogFill requests...
  const std::int64_t fill_by = kT0 + static_cast<std::int64_t>(31 * 1e9 / 200'000);
  FlushDecision d = policy.decide(batch(4), cheap, kT0 + 1000);
  CHECK_FALSE(d.flush());
  CHECK(d.recheck_ns == fill_by);
  CHECK(policy.decide(batch(BatchPolicy::kBacklogFill), cheap, kT0 + 1000).reason == FlushReason::kTarget);
  // ... or until the fill should have arrived, and never past a deadline's reserve.
  CHECK(policy.decide(batch(4), cheap, fill_by).reason == FlushReason::kTarget);
  // At 100,000/s the fill would take 310 us: the hold stops at kBacklogHoldNs.
  PolicyView slower = cheap;
  slower.arrivals_per_s = 100'000;
  CHECK(policy.decide(batch(4), slower, kT0 + 1000).recheck_ns == kT0 + BatchPolicy::kBacklogHoldNs);
  // A light model beside another's flood (the backlog is not its own): its request goes at once.
  PolicyView light = cheap;
  light.arrivals_per_s = 200;
  CHECK(policy.decide(batch(1), light, kT0 + 1000).reason == FlushReason::kTarget);
  // (a run of 4 at 20 us each, with its quarter and the margin: 0.3 ms before it)
  CHECK(policy.decide(batch(4, kT0 + 300'000), cheap, kT0 + 1000).reason == FlushReason::kDeadline);
  // A batch a lane's worker would run, or no backlog behind it: the rule does not apply.
  PolicyView on_lane = cheap;
  on_lane.runs_on_drain_thread = false;
  CHECK(policy.decide(batch(4), on_lane, kT0 + 1000).reason == FlushReason::kTarget);
  PolicyView no_backlog = cheap;
  no_backlog.drain_backlog = false;
  CHECK(policy.decide(batch(4), no_backlog, kT0 + 1000).reason == FlushReason::kTarget);
  // A max_batch under kBacklogFill is the fill.
  BatchLimits small = adaptive_limits();
  small.max_batch = 8;
  const BatchPolicy small_policy(small);
  CHECK(small_policy.decide(batch(7), cheap, kT0 + 1000).flush() == false);
  CHECK(small_policy.decide(batch(8), cheap, kT0 + 1000).reason == FlushReason::kFull);
}

TEST_CASE("adaptive: no available device flushes at once so the router answers") {
  const BatchPolicy policy(adaptive_limits());
  PolicyView none = view(19'512, 0);
  none.lanes = 0;
  CHECK(policy.decide(batch(3), none, kT0).reason == FlushReason::kNoDevice);
}

TEST_CASE("policy names parse both ways") {
  CHECK(parse_policy("adaptive") == PolicyKind::kAdaptive);
  CHECK(parse_policy("fixed") == PolicyKind::kFixed);
  CHECK_FALSE(parse_policy("Adaptive").has_value());
  CHECK(std::string(policy_name(PolicyKind::kAdaptive)) == "adaptive");
  CHECK(std::string(flush_reason_name(FlushReason::kFillTime)) == "fill_time");
}

// What the lanes look like from outside the router: how many can take work and how many are idle,
// their fitted cost (for the batching policy), and how long a request would wait behind what they
// hold (for admission); laggard devices' lanes left out (router_pick.cpp) while others run, and
// stalled lanes (a run far past its prediction) always.
#include <algorithm>
#include <climits>

#include "daemon/router.hpp"

namespace batchd {

bool Router::stalled(const Lane& lane, std::int64_t now_ns) const noexcept {
  if (lane.running.load(std::memory_order_acquire) == nullptr) return false;
  const std::int64_t elapsed_ns = now_ns - lane.started_ns.load(std::memory_order_relaxed);
  const auto predicted_ns = static_cast<double>(lane.predicted_ns.load(std::memory_order_relaxed));
  return static_cast<double>(elapsed_ns) > kStallFactor * predicted_ns + static_cast<double>(kStallSlackNs) ||
         elapsed_ns >= device_timeout_ns();
}

bool Router::counted_on(const Lane& lane, const PoolSpeed& speed, bool laggards_too, std::int64_t now_ns) const noexcept {
  return lane_usable(lane, now_ns) && (laggards_too || !speed.laggard(lane.id.device)) && !stalled(lane, now_ns);
}

bool Router::counts_laggards(const PoolSpeed& speed, std::int64_t now_ns) const noexcept {
  if (speed.laggards == 0) return false;
  return std::none_of(lanes_.begin(), lanes_.end(),
                      [&](const auto& lane) { return counted_on(*lane, speed, false, now_ns); });
}

std::int64_t Router::lane_busy_for_ns(const Lane& lane, const CostFit& cost, std::int64_t now_ns) const noexcept {
  const std::uint64_t batches = lane.outstanding.load(std::memory_order_relaxed);
  if (batches == 0) return 0;
  const std::uint64_t items = lane.outstanding_items.load(std::memory_order_relaxed);
  if (lane.running.load(std::memory_order_acquire) == nullptr) {  // all of them queued
    const double mean_items = static_cast<double>(items) / static_cast<double>(batches);
    return static_cast<std::int64_t>(static_cast<double>(batches) * cost.predict_ns(mean_items, 0));
  }
  const std::uint64_t running = std::min(items, lane.running_items.load(std::memory_order_relaxed));
  const double running_ns = cost.predict_ns(static_cast<double>(running), 0);
  // A run past its prediction is not about to end: expected to take as long again as it has run,
  // until the hang timeout at worst (then it is abandoned, and the lane with it).
  const auto elapsed_ns = static_cast<double>(now_ns - lane.started_ns.load(std::memory_order_relaxed));
  const auto timeout_ns = static_cast<double>(device_timeout_ns());
  double left_ns = elapsed_ns <= running_ns ? running_ns - elapsed_ns
                                            : std::min(elapsed_ns, std::max(timeout_ns - elapsed_ns, 0.0));
  if (batches > 1) {  // queued behind it: of the mean size of the rest
    const double queued_items = static_cast<double>(items - running) / static_cast<double>(batches - 1);
    left_ns += static_cast<double>(batches - 1) * cost.predict_ns(queued_items, 0);
  }
  return static_cast<std::int64_t>(left_ns);
}

Router::DelayView Router::delay_view(std::int64_t now_ns) const noexcept {
  DelayView out;
  const LaneView view = lane_view(now_ns);
  out.lanes = view.lanes;
  out.cost = view.cost;
  out.dispatched = dispatched_requests();
  if (view.lanes == 0) return out;
  const PoolSpeed speed = pool_speed(now_ns);
  const bool laggards_too = counts_laggards(speed, now_ns);
  if (view.cost.fitted) {
    out.first_free_ns = INT64_MAX;
    for (const auto& lane : lanes_) {
      if (!counted_on(*lane, speed, laggards_too, now_ns)) continue;
      out.first_free_ns = std::min(out.first_free_ns, lane_busy_for_ns(*lane, view.cost, now_ns));
    }
  }
  std::uint64_t measured = 0;
  for (unsigned d = 0; d < health_.size(); ++d) {
    const DeviceHealth& h = *health_[d];
    if (!h.available(now_ns) || h.batch_ns_estimate(now_ns) == 0 || (speed.laggard(d) && !laggards_too)) continue;
    ++measured;
    out.measured_batch_ns += h.batch_ns_estimate(now_ns);
  }
  if (measured > 0) out.measured_batch_ns /= measured;
  return out;
}

std::int64_t Router::estimate_delay_ns(const DelayView& view, std::uint64_t waiting_ahead,
                                      std::uint32_t max_batch) noexcept {
  if (view.lanes == 0) return 0;
  const std::uint64_t lanes = view.lanes;
  if (view.cost.fitted) {
    // The first lane to free takes the next batch; the waiting requests ahead and this one leave
    // in batches as big as they fill, up to max_batch, spread over the lanes.
    const std::uint64_t position = waiting_ahead + 1;
    const std::uint64_t per_batch =
        std::clamp<std::uint64_t>((position + lanes - 1) / lanes, 1, std::max<std::uint32_t>(1, max_batch));
    const std::uint64_t rounds = (position + per_batch * lanes - 1) / (per_batch * lanes);
    const double batch_ns = view.cost.predict_ns(static_cast<double>(per_batch), 0);
    return view.first_free_ns + static_cast<std::int64_t>(static_cast<double>(rounds) * batch_ns);
  }
  // Unfitted: the measured batch time, in batches of max_batch, for everything taken.
  if (view.measured_batch_ns == 0) return 0;
  const std::uint64_t batches = (waiting_ahead + view.dispatched) / std::max<std::uint32_t>(1, max_batch) + 2;
  return static_cast<std::int64_t>(batches * view.measured_batch_ns / lanes);
}

std::uint64_t Router::dispatched_requests() const noexcept {
  std::uint64_t dispatched = 0;
  for (const auto& h : health_) dispatched += h->outstanding_items.load(std::memory_order_relaxed);
  return dispatched;
}

Router::LaneView Router::lane_view(std::int64_t now_ns) const noexcept {
  LaneView view;
  unsigned fitted = 0;
  std::uint64_t samples = 0;
  // A laggard's lanes are not counted on: an idle one would make the policy flush at once, and
  // its cost would drag the mean far from what the batches meet (router_pick.cpp); unless the
  // other lanes are all stalled or gone, when routing sends the laggards the work. Nor is a
  // stalled lane: the policy would hold batches for it to free.
  const PoolSpeed speed = pool_speed(now_ns);
  const bool laggards_too = counts_laggards(speed, now_ns);
  for (const auto& lane : lanes_) {
    const DeviceHealth& h = *health_[lane->id.device];
    if (!counted_on(*lane, speed, laggards_too, now_ns)) continue;
    ++view.lanes;
    if (lane->outstanding.load(std::memory_order_seq_cst) == 0) ++view.idle_lanes;
    view.last_batch_end_ns = std::max(view.last_batch_end_ns, h.last_success_ns());
    if (lane->id.stream != 0) continue;  // one fit per device
    // A fit is trusted only while its device keeps running batches (DeviceHealth::kStaleNs): a
    // fit that went wrong must not keep the work that would correct it away for good.
    if (h.batch_ns_estimate(now_ns) == 0) continue;
    const CostFit fit = cost_[lane->id.device]->fit();
    samples += fit.samples;
    if (!fit.fitted) continue;
    ++fitted;
    view.cost.fixed_ns += fit.fixed_ns;
    view.cost.per_item_ns += fit.per_item_ns;
    view.cost.per_byte_ns += fit.per_byte_ns;
  }
  if (fitted > 0) {
    view.cost.fixed_ns /= fitted;
    view.cost.per_item_ns /= fitted;
    view.cost.per_byte_ns /= fitted;
    view.cost.fitted = true;
  }
  view.cost.samples = samples;
  return view;
}

}  // namespace batchd

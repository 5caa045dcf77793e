// Where a batch goes: to the lane where it is expected to finish first, from each device's fitted
// cost and what its lane already holds, so a slower device gets work only when the faster ones'
// queues make it the quicker way. A device far slower than the fastest (a laggard: a slower GPU,
// a worker under memory pressure, a model that got slow) is left out of what the batching policy
// and admission count on, and gets a probe, a copy of a few requests whose answers are dropped,
// every kProbeIntervalNs while idle: its estimate stays fresh, and a probe that runs far faster than
// predicted, or about as fast as the fastest device would, brings it back into the pool at once.
// A lane whose run has stalled (far past its prediction) is taken last.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <limits>

#include "daemon/router.hpp"
#include "shm/clock.hpp"

namespace batchd {

double Router::predict_run_ns(unsigned device, double items, double bytes) const noexcept {
  const CostFit fit = cost_[device]->fit();
  if (fit.fitted) return fit.predict_ns(items, bytes);
  return static_cast<double>(health_[device]->measured_batch_ns());
}

PoolSpeed Router::measure_pool_speed(std::int64_t now_ns) const noexcept {
  thread_local std::vector<DeviceSpeed> devices;
  devices.assign(health_.size(), DeviceSpeed{});
  for (unsigned d = 0; d < health_.size(); ++d) {
    const CostFit fit = cost_[d]->fit();
    const SpeedState& state = *speed_[d];
    const std::uint64_t runs = state.window_runs.load(std::memory_order_relaxed);
    devices[d] = DeviceSpeed{
        .available = health_[d]->available(now_ns),
        .reference_ns = predict_run_ns(d, kReferenceItems, kReferenceBytes),
        .fitted = fit.fitted,
        .warm_batches = runs > LaggardVerdict::kColdBatches ? runs - LaggardVerdict::kColdBatches : 0,
        .window_age_ns = now_ns - state.window_opened_ns.load(std::memory_order_relaxed),
    };
  }
  const PoolSpeed speed = LaggardVerdict::judge(devices, speed_laggards_.load(std::memory_order_relaxed));
  speed_fastest_ns_.store(speed.fastest_ns, std::memory_order_relaxed);
  speed_fastest_device_.store(speed.fastest_device, std::memory_order_relaxed);
  const std::uint64_t before = speed_laggards_.exchange(speed.laggards, std::memory_order_relaxed);
  // Said once a change: which devices get probes only is what an operator asks of a slow pool.
  for (std::uint64_t changed = before ^ speed.laggards; changed != 0; changed &= changed - 1) {
    const auto d = static_cast<unsigned>(std::countr_zero(changed));
    spdlog::info("{} device {}: {} us a reference batch against the fastest's {} us: {}", backend_.name(), d,
                 static_cast<std::int64_t>(predict_run_ns(d, kReferenceItems, kReferenceBytes) / 1000),
                 static_cast<std::int64_t>(speed.fastest_ns / 1000),
                 speed.laggard(d) ? "probes only until it is faster" : "back in the pool");
  }
  speed_due_ns_.store(now_ns + kSpeedRefreshNs, std::memory_order_release);
  return speed;
}

namespace {

// The score of a lane taken only when no other can take the batch.
constexpr std::uint64_t kLastResort = std::numeric_limits<std::uint64_t>::max() - 1;

}  // namespace

void Router::open_window(unsigned device, std::int64_t now_ns) noexcept {
  SpeedState& state = *speed_[device];
  state.window_opened_ns.store(now_ns, std::memory_order_relaxed);
  state.window_runs.store(0, std::memory_order_relaxed);
}

std::bitset<64> Router::laggards(std::int64_t now_ns) const noexcept {
  std::bitset<64> out;
  const PoolSpeed speed = pool_speed(now_ns);
  for (unsigned d = 0; d < health_.size() && d < out.size(); ++d) {
    if (health_[d]->present() && speed.laggard(d)) out.set(d);
  }
  return out;
}

Router::Lane* Router::pick_lane(const Batch& batch, std::int64_t now_ns, bool* memory_short) noexcept {
  // Expected finish on each lane: until the lane has run what it holds, then this batch's run, at
  // its device's fitted cost. A device not yet fitted is assumed as fast as the fastest, so it is
  // tried and measured; with nothing measured anywhere, the emptiest lane wins. Lanes within 25%
  // of the best count as equal and take turns, so equally fast devices share the work.
  thread_local std::vector<std::uint64_t> scores;
  scores.assign(lanes_.size(), std::numeric_limits<std::uint64_t>::max());
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t need = memory_need(batch);
  const auto items = static_cast<double>(batch.size());
  const auto bytes = static_cast<double>(batch.input_bytes.size());
  const PoolSpeed speed = pool_speed(now_ns);
  const double fastest = speed.fastest_ns;
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    const Lane& lane = *lanes_[i];
    const unsigned d = lane.id.device;
    if ((batch.failed_devices & device_bit(d)) != 0 || !lane_usable(lane, now_ns)) continue;
    if (!fits_memory(batch, need, d)) {
      if (memory_short != nullptr) *memory_short = true;
      continue;
    }
    if (stalled(lane, now_ns)) {  // whatever waits there waits for a run that does not end
      scores[i] = kLastResort;
      best = std::min(best, scores[i]);
      continue;
    }
    const CostFit fit = cost_[d]->fit();
    double run_ns = 0;
    const std::uint64_t queued = lane.outstanding.load(std::memory_order_relaxed);
    double busy_ns = 0;
    if (fit.fitted) {
      run_ns = fit.predict_ns(items, bytes);
      busy_ns = static_cast<double>(lane_busy_for_ns(lane, fit, now_ns));
    } else if (health_[d]->outstanding_batches.load(std::memory_order_relaxed) != 0) {
      // Not yet fitted and already running a batch: nothing more until that run says what it
      // costs (a device far slower than the pool would otherwise collect a queue of them).
      scores[i] = kLastResort;
      best = std::min(best, scores[i]);
      continue;
    } else {
      // Not yet fitted (new, or brought back by a probe): tried as if no slower than the fastest,
      // one batch at a time, until its fit is trusted. Judged on its few first runs instead, a
      // device that ran one of them at a bad moment would lose every pick to a fitted peer, and
      // with no more batches its estimate would never move again. One far slower costs one batch
      // at a time until the verdict has its evidence (laggard_verdict.hpp).
      run_ns = static_cast<double>(health_[d]->measured_batch_ns());
      if (fastest > 0 && !speed.laggard(d)) {
        const double like_fastest = fastest * std::max(items, 1.0) / kReferenceItems;
        run_ns = run_ns == 0 ? like_fastest : std::min(run_ns, like_fastest);
      }
      busy_ns = static_cast<double>(queued) * run_ns;
    }
    // An idle lane on a shared device still waits for the run another model has there.
    if (group_ && queued == 0) busy_ns += static_cast<double>(group_->wait_ns(group_device_[d], now_ns));
    scores[i] = std::min<std::uint64_t>(static_cast<std::uint64_t>(busy_ns + run_ns) + queued, kLastResort - 1);
    best = std::min(best, scores[i]);
  }
  if (best == std::numeric_limits<std::uint64_t>::max()) return nullptr;
  // Turns are taken among the eligible lanes only: rotating a start index over all lanes would
  // hand the turns of skipped lanes to whichever eligible lane follows them.
  const std::uint64_t good_enough = best >= kLastResort / 2 ? best : best + best / 4;
  std::size_t eligible = 0;
  for (std::uint64_t score : scores) eligible += score <= good_enough ? 1 : 0;
  std::size_t turn = rotation_.fetch_add(1, std::memory_order_relaxed) % eligible;
  for (std::size_t i = 0; i < lanes_.size(); ++i) {
    if (scores[i] <= good_enough && turn-- == 0) return lanes_[i].get();
  }
  return nullptr;
}

void Router::probe_laggards(const Batch& batch, std::int64_t now_ns) noexcept {
  const PoolSpeed speed = pool_speed(now_ns);
  if (batch.shadow || batch.size() == 0 || speed.laggards == 0) return;
  for (unsigned d = 0; d < health_.size(); ++d) {
    if (!speed.laggard(d)) continue;
    SpeedState& probe = *speed_[d];
    std::int64_t last = probe.probed_ns.load(std::memory_order_relaxed);
    if (now_ns - last < kProbeIntervalNs) continue;
    const DeviceHealth& h = *health_[d];
    if (h.state() != DeviceState::kHealthy || !h.available(now_ns) ||
        h.outstanding_batches.load(std::memory_order_relaxed) != 0) {
      continue;
    }
    Lane* lane = nullptr;
    for (auto& candidate : lanes_) {
      if (candidate->id.device == d && lane_usable(*candidate, now_ns)) {
        lane = candidate.get();
        break;
      }
    }
    if (lane == nullptr || !probe.probed_ns.compare_exchange_strong(last, now_ns, std::memory_order_relaxed)) {
      continue;
    }
    Batch* copy = acquire_extra();
    copy->shadow = true;
    copy->opened_ns = batch.opened_ns;
    // Up to a reference batch of the requests: a probe of one measures a device's fixed cost
    // only, and a device slow per request would pass it as recovered (learn_from_probe compares like
    // with like).
    const BatchInput in = batch.input();
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < in.size() && i < kReferenceItems; ++i) {
      bytes += in.at(i).size();
      if (i > 0 && bytes > kProbeMaxBytes) break;
      copy->append(in.at(i), batch.requests[i]);
    }
    enqueue_on(*lane, copy);
  }
}

void Router::learn_from_probe(unsigned device, const Batch& probe, std::int64_t run_ns) noexcept {
  const auto items = static_cast<double>(probe.size());
  const auto bytes = static_cast<double>(probe.input_bytes.size());
  const double predicted = predict_run_ns(device, items, bytes);
  const std::int64_t now_ns = shm::monotonic_ns();
  const PoolSpeed speed = pool_speed(now_ns);
  const double fastest = speed.fastest_ns > 0 && speed.fastest_device != device
                             ? predict_run_ns(speed.fastest_device, items, bytes)
                             : 0;
  if (!LaggardVerdict::probe_shows_recovery(static_cast<double>(run_ns), predicted, fastest)) return;
  spdlog::info("{} device {}: a probe ran in {} us, predicted {} us (the fastest: {} us): it is fast again; "
               "its cost is measured afresh",
               backend_.name(), device, run_ns / 1000, static_cast<std::int64_t>(predicted / 1000),
               static_cast<std::int64_t>(fastest / 1000));
  cost_[device]->reset();
  health_[device]->forget_speed();
  open_window(device, now_ns);
  refresh_pool_speed();
}

}  // namespace batchd

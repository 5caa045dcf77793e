// Where a batch goes: to the lane where it is expected to finish first, from each device's fitted
// cost and what its lane already holds, so a slower device gets work only when the faster ones'
// queues make it the quicker way. A device far slower than the fastest (a laggard: a slower GPU,
// a worker under memory pressure, a model that got slow) is left out of what the batching policy
// and admission count on, and gets a probe, a copy of one request whose answer is dropped, every
// kProbeIntervalNs while idle: its estimate stays fresh, and a probe that runs far faster than
// predicted brings it back into the pool at once.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <limits>

#include "daemon/router.hpp"

namespace batchd {

double Router::predict_run_ns(unsigned device, double items, double bytes) const noexcept {
  const CostFit fit = cost_[device]->fit();
  if (fit.fitted) return fit.predict_ns(items, bytes);
  return static_cast<double>(health_[device]->measured_batch_ns());
}

double Router::fastest_reference_ns(std::int64_t now_ns) const noexcept {
  double fastest = 0;
  for (unsigned d = 0; d < health_.size(); ++d) {
    if (!health_[d]->available(now_ns)) continue;
    const double ref = predict_run_ns(d, kReferenceItems, kReferenceBytes);
    if (ref > 0 && (fastest == 0 || ref < fastest)) fastest = ref;
  }
  return fastest;
}

bool Router::laggard(unsigned device, double fastest_reference_ns) const noexcept {
  if (fastest_reference_ns <= 0) return false;
  return predict_run_ns(device, kReferenceItems, kReferenceBytes) >
         kLaggardFactor * fastest_reference_ns + kLaggardSlackNs;
}

Router::PoolSpeed Router::measure_pool_speed(std::int64_t now_ns) const noexcept {
  PoolSpeed speed;
  speed.fastest_ns = fastest_reference_ns(now_ns);
  for (unsigned d = 0; d < health_.size() && d < 64; ++d) {
    if (laggard(d, speed.fastest_ns)) speed.laggards |= std::uint64_t{1} << d;
  }
  speed_fastest_ns_.store(speed.fastest_ns, std::memory_order_relaxed);
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
      // with no more batches its estimate would never move again. One far slower is a laggard
      // after one run (the bar reads the measured runs until the fit is trusted): judged on them.
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
    ProbeState& probe = *probe_[d];
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
    copy->append(batch.input().at(0), batch.requests.front());
    probe.probes.fetch_add(1, std::memory_order_relaxed);
    enqueue_on(*lane, copy);
  }
}

void Router::learn_from_probe(unsigned device, const Batch& probe, std::int64_t run_ns) noexcept {
  const double predicted =
      predict_run_ns(device, static_cast<double>(probe.size()), static_cast<double>(probe.input_bytes.size()));
  if (static_cast<double>(run_ns) * kLaggardFactor + kLaggardSlackNs >= predicted) return;
  spdlog::info("{} device {}: a probe ran in {} us, predicted {} us: it is faster again; its cost is "
               "measured afresh",
               backend_.name(), device, run_ns / 1000, static_cast<std::int64_t>(predicted / 1000));
  cost_[device]->reset();
  health_[device]->forget_speed();
  refresh_pool_speed();
}

}  // namespace batchd

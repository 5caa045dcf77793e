// Which devices are laggards: far slower than the fastest on a reference batch, so the batching
// policy and admission do not count on them and they get probes rather than work (router_pick.cpp).
// A verdict needs evidence: a device is judged only once it has run enough batches, for long
// enough, in its current evidence window (opened when it arrives or its cost is measured afresh),
// its cold first batches left out of its fit. A device judged on a few cold batches (page faults,
// a shared core) would otherwise lose every pick for good, and a stalled peer would then be the
// only lane counted on. A laggard stays one until it is clearly faster (hysteresis: a fastest
// device's fit moves with every batch), or until a probe runs as fast as the fastest would.
// Pure: what the router knows of each device comes in.
#pragma once

#include <cstdint>
#include <span>

namespace batchd {

// What the verdict reads of one device.
struct DeviceSpeed {
  bool available = false;          // may take work now
  double reference_ns = 0;         // its fit's prediction for the reference batch; 0: unmeasured
  bool fitted = false;             // that fit is trusted (CostModel::kMinSamples)
  std::uint64_t warm_batches = 0;  // runs measured in its window, the cold first ones not counted
  std::int64_t window_age_ns = 0;  // since its window opened
};

// The verdict: the fastest device with evidence, and the laggards (of the first 64 devices; a
// device past them is never one).
struct PoolSpeed {
  double fastest_ns = 0;  // the fastest's reference batch; 0: no device has evidence yet
  unsigned fastest_device = 0;
  std::uint64_t laggards = 0;
  [[nodiscard]] bool laggard(unsigned device) const noexcept {
    return device < 64 && (laggards >> device & 1U) != 0;
  }
};

struct LaggardVerdict {
  // Far slower: kFactor times the fastest and kSlackNs more. Below the slack, the difference is a
  // VM's wake-ups and a cold cache (a worker probed twice a second runs cold), not the device.
  static constexpr double kFactor = 4.0;
  static constexpr double kSlackNs = 1e6;
  // A laggard is back once its reference batch is within this factor (and the slack) again.
  static constexpr double kBackFactor = 3.0;
  // A window's first runs, left out of the device's fit: a new worker's first batches fault its
  // pages in and wait for a core beside a loaded pool (16 ms against a steady 28 us, measured).
  static constexpr std::uint64_t kColdBatches = 2;
  // The evidence a verdict needs: as many warm runs as the fit needs to be trusted, over at least
  // this long, so that the start-up of the processes beside it is not taken for its speed.
  static constexpr std::uint64_t kMinWarmBatches = 8;
  static constexpr std::int64_t kMinWindowNs = 1'000'000'000;

  [[nodiscard]] static bool has_evidence(const DeviceSpeed& device) noexcept {
    return device.fitted && device.reference_ns > 0 && device.warm_batches >= kMinWarmBatches &&
           device.window_age_ns >= kMinWindowNs;
  }

  // The pool's verdict now, given the laggards of the last one.
  [[nodiscard]] static PoolSpeed judge(std::span<const DeviceSpeed> devices, std::uint64_t laggards_before) noexcept;

  // A laggard's probe ran in run_ns: whether it is fast again (then its cost is measured afresh,
  // in a new window). own_predicted_ns: its fit's prediction for the probe; fastest_predicted_ns:
  // the fastest device's for the same probe (0: none). Either far faster than its own fit says,
  // or about as fast as the fastest would be (the bar a laggard leaves by): a device once slow
  // that is now as fast as the pool must not wait for its fit, which a probe now and then barely
  // moves, or for the fastest to go.
  [[nodiscard]] static bool probe_shows_recovery(double run_ns, double own_predicted_ns,
                                                 double fastest_predicted_ns) noexcept {
    if (run_ns * kFactor + kSlackNs < own_predicted_ns) return true;
    return fastest_predicted_ns > 0 && run_ns <= kBackFactor * fastest_predicted_ns + kSlackNs;
  }
};

}  // namespace batchd

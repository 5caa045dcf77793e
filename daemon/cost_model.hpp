// A device's batch time as a function of the batch, learnt online: t(n, bytes) = fixed + per_item
// x n + per_byte x bytes, fitted by recursive least squares over the batches the device ran. The
// batching policy and the router read it to predict what a batch will cost before they send it.
//
// Why this fit: a GPU launch (or a CPU hand-off) costs a fixed amount however small the batch,
// and the work inside grows with the number of inputs and their bytes; three numbers describe
// that, and least squares finds them from a few dozen batches of different sizes. The fit:
// - forgets old batches (each weighs kForgetting as much per newer batch), so a device that slows
//   down is followed within a few dozen batches, and drops the old fit at once when a run of
//   consecutive batches all land far on the same side of it (a step change, not noise);
// - caps the pull of any one outlier (a Huber weight: a batch off by more than kHuberK scale units
//   counts as if it were that far), so a preempted or page-faulting run does not skew it;
// - starts from a prior of "no fixed cost, no per-item cost" until kMinSamples batches were seen:
//   unmeasured, the policy does not wait for batches to fill (waiting pays only for a known fixed
//   cost).
// Thread-safe: lanes of one device record concurrently (a mutex, a few hundred nanoseconds per
// batch); readers take the published fit without locking.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace batchd {

// A fitted cost in nanoseconds. Every coefficient is at least 0: a fit that says more inputs take
// less time is noise, and a negative per-item cost would make the policy wait forever.
struct CostFit {
  double fixed_ns = 0;
  double per_item_ns = 0;
  double per_byte_ns = 0;
  std::uint64_t samples = 0;  // batches the fit has seen (all of them, not only the remembered)
  bool fitted = false;        // at least kMinSamples batches: trust it

  [[nodiscard]] double predict_ns(double items, double bytes) const noexcept {
    return fixed_ns + per_item_ns * items + per_byte_ns * bytes;
  }
};

class CostModel {
 public:
  static constexpr std::uint64_t kMinSamples = 8;
  static constexpr double kForgetting = 0.98;  // memory of about 1 / (1 - 0.98) = 50 batches
  static constexpr double kHuberK = 3.0;
  static constexpr unsigned kStepRun = 6;  // same-side outliers in a row that mean a step change

  CostModel() noexcept { reset_locked(); }
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // A batch of `items` inputs and `bytes` input bytes ran in run_ns.
  void record(std::uint64_t items, std::uint64_t bytes, std::int64_t run_ns) noexcept;

  // The current fit (lock-free; the fields of one publication may mix with the next one's, which
  // only blends two nearly equal fits).
  [[nodiscard]] CostFit fit() const noexcept;

  // Forgets everything (a device that was unhealthy may come back different).
  void reset() noexcept;

 private:
  static constexpr int kDims = 3;  // fixed, per item, per byte
  void reset_locked() noexcept;
  void publish_locked() noexcept;

  std::mutex mu_;
  // RLS state over the scaled features x = (1, n / kItemScale, bytes / kByteScale), times in
  // microseconds: comparable magnitudes keep the 3x3 update well conditioned.
  double theta_[kDims]{};
  double p_[kDims][kDims]{};
  double scale_us_ = 0;          // running mean absolute residual: the Huber unit
  double mean_x_[kDims]{1, 0, 0};  // recent mean features: where predictions must stay right
  int step_side_ = 0;            // sign of the current run of outliers
  unsigned step_run_ = 0;        // its length
  std::uint64_t remembered_ = 0;  // samples since the last reset

  std::atomic<double> fixed_ns_{0};
  std::atomic<double> per_item_ns_{0};
  std::atomic<double> per_byte_ns_{0};
  std::atomic<std::uint64_t> samples_{0};
  std::atomic<bool> fitted_{false};
};

}  // namespace batchd

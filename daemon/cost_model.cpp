#include "daemon/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace batchd {
namespace {

constexpr double kItemScale = 64;      // a feature of 1 for a 64-request batch
constexpr double kByteScale = 65536;   // and for 64 KiB of input
// The prior's variance (µs²): weak enough that the first batches decide, and the cap the forgetting
// may grow an unexcited direction back to (without it, a device that only ever runs one batch size
// would see that direction's variance grow without bound and the fit jump on the next odd batch).
constexpr double kPriorVariance = 1e8;

}  // namespace

void CostModel::reset_locked() noexcept {
  for (int i = 0; i < kDims; ++i) {
    theta_[i] = 0;
    for (int j = 0; j < kDims; ++j) p_[i][j] = i == j ? kPriorVariance : 0;
  }
  scale_us_ = 0;
  mean_x_[0] = 1;
  mean_x_[1] = mean_x_[2] = 0;
  step_side_ = 0;
  step_run_ = 0;
  remembered_ = 0;
}

void CostModel::reset() noexcept {
  std::lock_guard lock(mu_);
  reset_locked();
  publish_locked();
}

void CostModel::record(std::uint64_t items, std::uint64_t bytes, std::int64_t run_ns) noexcept {
  const double x[kDims] = {1.0, static_cast<double>(items) / kItemScale,
                           static_cast<double>(bytes) / kByteScale};
  const double y = static_cast<double>(std::max<std::int64_t>(run_ns, 0)) / 1000.0;
  std::lock_guard lock(mu_);
  double predicted = 0;
  for (int i = 0; i < kDims; ++i) predicted += theta_[i] * x[i];
  double residual = y - predicted;

  if (remembered_ >= kMinSamples) {
    // The Huber unit: the typical miss, but never below 1% of the batch time (a deterministic
    // device misses by almost nothing, and every small jitter would then look like an outlier).
    const double unit = std::max(scale_us_, 0.01 * std::abs(predicted) + 0.1);
    const double limit = kHuberK * unit;
    if (std::abs(residual) > limit) {
      const int side = residual > 0 ? 1 : -1;
      step_run_ = side == step_side_ ? step_run_ + 1 : 1;
      step_side_ = side;
      if (step_run_ >= kStepRun) {
        // Not noise: the device changed. Start over from this batch.
        reset_locked();
        predicted = 0;
        residual = y;
      } else {
        scale_us_ = 0.95 * scale_us_ + 0.05 * limit;
        residual = side * limit;
      }
    } else {
      step_run_ = 0;
      scale_us_ = 0.95 * scale_us_ + 0.05 * std::abs(residual);
    }
  } else {
    scale_us_ = remembered_ == 0 ? std::abs(residual) : 0.8 * scale_us_ + 0.2 * std::abs(residual);
  }

  // Recursive least squares with forgetting: gain k = P x / (lambda + x' P x).
  double px[kDims];
  double denom = kForgetting;
  for (int i = 0; i < kDims; ++i) {
    px[i] = 0;
    for (int j = 0; j < kDims; ++j) px[i] += p_[i][j] * x[j];
    denom += x[i] * px[i];
  }
  if (!(denom > 0) || !std::isfinite(denom)) {
    // Never with a positive definite covariance; rounding can take it there. Start over.
    reset_locked();
    samples_.fetch_add(1, std::memory_order_relaxed);
    publish_locked();
    return;
  }
  double gain[kDims];
  for (int i = 0; i < kDims; ++i) {
    gain[i] = px[i] / denom;
    theta_[i] += gain[i] * residual;
  }
  if (!std::isfinite(theta_[0]) || !std::isfinite(theta_[1]) || !std::isfinite(theta_[2])) {
    reset_locked();
    samples_.fetch_add(1, std::memory_order_relaxed);
    publish_locked();
    return;
  }
  // P = (P - k x' P) / lambda, without the division where it would grow past the prior.
  double max_diag = 0;
  double min_diag = kPriorVariance;
  for (int i = 0; i < kDims; ++i) {
    for (int j = 0; j < kDims; ++j) p_[i][j] -= gain[i] * px[j];
  }
  for (int i = 0; i < kDims; ++i) {
    for (int j = 0; j < i; ++j) p_[i][j] = p_[j][i] = (p_[i][j] + p_[j][i]) / 2;  // rounding drifts apart
    max_diag = std::max(max_diag, p_[i][i]);
    min_diag = std::min(min_diag, p_[i][i]);
  }
  if (min_diag <= 0) {
    // Rounding has cost the covariance its positive definiteness (inputs that never vary, such as
    // bytes that always grow with the count, leave a direction it cannot learn): start the
    // covariance over, keeping the coefficients.
    for (int i = 0; i < kDims; ++i) {
      for (int j = 0; j < kDims; ++j) p_[i][j] = i == j ? kPriorVariance : 0;
    }
  } else if (max_diag / kForgetting <= kPriorVariance) {
    for (auto& row : p_) {
      for (double& v : row) v /= kForgetting;
    }
  }
  mean_x_[1] = remembered_ == 0 ? x[1] : 0.95 * mean_x_[1] + 0.05 * x[1];
  mean_x_[2] = remembered_ == 0 ? x[2] : 0.95 * mean_x_[2] + 0.05 * x[2];
  ++remembered_;
  samples_.fetch_add(1, std::memory_order_relaxed);
  publish_locked();
}

void CostModel::publish_locked() noexcept {
  // A negative per-request or per-byte cost is noise in a direction the batches barely explore
  // (sizes in a narrow band, bytes that grow with the count): publish it as zero and move its
  // part at the recent mean batch into the fixed cost, so that predictions near the batches the
  // device really runs stay what the fit says.
  double fixed = theta_[0];
  double per_item = theta_[1];
  double per_byte = theta_[2];
  if (per_item < 0) {
    fixed += per_item * mean_x_[1];
    per_item = 0;
  }
  if (per_byte < 0) {
    fixed += per_byte * mean_x_[2];
    per_byte = 0;
  }
  // Likewise a negative fixed cost (batches all of about one size cannot tell a fixed cost from a
  // per-request one): its part goes into the per-request cost at the recent mean batch, so a batch
  // of that size is still predicted right rather than a fixed cost's worth too slow.
  if (fixed < 0) {
    if (mean_x_[1] > 0) per_item += fixed / mean_x_[1];
    fixed = 0;
    per_item = std::max(per_item, 0.0);
  }
  fixed_ns_.store(fixed * 1000.0, std::memory_order_relaxed);
  per_item_ns_.store(per_item * 1000.0 / kItemScale, std::memory_order_relaxed);
  per_byte_ns_.store(per_byte * 1000.0 / kByteScale, std::memory_order_relaxed);
  fitted_.store(remembered_ >= kMinSamples, std::memory_order_release);
}

CostFit CostModel::fit() const noexcept {
  CostFit f;
  f.fitted = fitted_.load(std::memory_order_acquire);
  f.fixed_ns = fixed_ns_.load(std::memory_order_relaxed);
  f.per_item_ns = per_item_ns_.load(std::memory_order_relaxed);
  f.per_byte_ns = per_byte_ns_.load(std::memory_order_relaxed);
  f.samples = samples_.load(std::memory_order_relaxed);
  return f;
}

}  // namespace batchd

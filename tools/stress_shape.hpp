// The open loop's offered rate over time: constant (--rate), or a cycle of segments repeated for
// the whole run (--shape): bursts with gaps, steps, ramps, a diurnal-like swing. Request `id` is
// meant to go when the rate's integral since the start reaches id, so the schedule is a pure
// function of the id, as with a constant rate, and never drifts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"

namespace batchd::stress {

// The rate goes linearly from `from` to `to` (requests per second) over `seconds`.
struct RateSegment {
  double from = 0;
  double to = 0;
  double seconds = 0;
};

class RateShape {
 public:
  RateShape() = default;
  static RateShape constant(double rate);
  // "SEGMENT,SEGMENT,...", each RATE:SECONDS (held) or FROM..TO:SECONDS (a linear ramp), rates in
  // requests per second >= 0, durations > 0, at least one request per cycle. EINVAL and why for
  // anything else.
  static Expected<RateShape> parse(std::string_view spec);

  // Nanoseconds from the start until request `id` is due.
  [[nodiscard]] std::int64_t offset_ns(std::uint64_t id) const noexcept;
  // Requests per second over a whole cycle.
  [[nodiscard]] double mean_rate() const noexcept { return cycle_requests_ / cycle_s_; }
  [[nodiscard]] bool is_constant() const noexcept {
    return segments_.size() == 1 && segments_[0].from == segments_[0].to;
  }
  [[nodiscard]] const std::vector<RateSegment>& segments() const noexcept { return segments_; }
  // "60000:0.02,0:0.08" as parsed (a constant rate: its number), for the report.
  [[nodiscard]] std::string describe() const;

 private:
  explicit RateShape(std::vector<RateSegment> segments);

  std::vector<RateSegment> segments_{RateSegment{1, 1, 1}};
  std::vector<double> requests_before_;  // per segment: the cycle's requests before it starts
  std::vector<double> seconds_before_;
  double cycle_requests_ = 1;
  double cycle_s_ = 1;
};

}  // namespace batchd::stress

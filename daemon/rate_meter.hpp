// The arrival rate of requests (and of their bytes) as an exponentially weighted moving average
// with time constant kTauNs: an exponentially decaying count, which is a rate once divided by the
// time constant. After a step in load it has moved 63% of the way in one time constant and 98%
// in four, so with 250 ms it follows a change within about a second while a 10 ms lull does not
// fool it. Time comes in as an argument (tests drive it). Drain thread only.
#pragma once

#include <cmath>
#include <cstdint>

namespace batchd {

class RateMeter {
 public:
  static constexpr std::int64_t kTauNs = 250'000'000;

  // `count` requests of `bytes` input bytes in all arrived at now_ns.
  void add(std::uint64_t count, std::uint64_t bytes, std::int64_t now_ns) noexcept {
    decay_to(now_ns);
    count_ += static_cast<double>(count);
    bytes_ += static_cast<double>(bytes);
  }

  // Requests per second at now_ns.
  [[nodiscard]] double per_second(std::int64_t now_ns) const noexcept {
    return count_ * decay_factor(now_ns) * (1e9 / static_cast<double>(kTauNs));
  }
  // Input bytes per second at now_ns.
  [[nodiscard]] double bytes_per_second(std::int64_t now_ns) const noexcept {
    return bytes_ * decay_factor(now_ns) * (1e9 / static_cast<double>(kTauNs));
  }
  // Mean input bytes of the recent requests (0 while none came).
  [[nodiscard]] double mean_bytes() const noexcept { return count_ > 0 ? bytes_ / count_ : 0; }

 private:
  [[nodiscard]] double decay_factor(std::int64_t now_ns) const noexcept {
    if (now_ns <= last_ns_) return 1.0;
    return std::exp(-static_cast<double>(now_ns - last_ns_) / static_cast<double>(kTauNs));
  }
  void decay_to(std::int64_t now_ns) noexcept {
    const double f = decay_factor(now_ns);
    count_ *= f;
    bytes_ *= f;
    if (now_ns > last_ns_) last_ns_ = now_ns;
  }

  double count_ = 0;  // decayed count: kTauNs x the rate
  double bytes_ = 0;
  std::int64_t last_ns_ = 0;
};

}  // namespace batchd

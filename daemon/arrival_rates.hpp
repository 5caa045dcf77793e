// The requests a model's drain passes took, as rates by class (RateMeter): what its batching
// policy reads (all classes together) and its admission (the classes that pass a request).
// Counted once a pass, not once a request. Drain thread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "daemon/rate_meter.hpp"
#include "shm/layout.hpp"

namespace batchd {

class ArrivalRates {
 public:
  // The pass took a request of this class with `bytes` of input.
  void note(shm::WirePriority priority, std::uint64_t bytes) noexcept {
    ++pass_taken_[index(priority)];
    pass_bytes_[index(priority)] += bytes;
  }
  // The pass is over: its requests join the rates. Returns how many it took.
  std::uint64_t end_pass(std::int64_t now_ns) noexcept {
    std::uint64_t taken = 0;
    for (std::size_t c = 0; c < meters_.size(); ++c) {
      if (pass_taken_[c] == 0) continue;
      meters_[c].add(pass_taken_[c], pass_bytes_[c], now_ns);
      taken += pass_taken_[c];
    }
    pass_taken_.fill(0);
    pass_bytes_.fill(0);
    return taken;
  }

  // Requests per second of one class, and of all.
  [[nodiscard]] double per_second(shm::WirePriority priority, std::int64_t now_ns) const noexcept {
    return meters_[index(priority)].per_second(now_ns);
  }
  [[nodiscard]] double per_second(std::int64_t now_ns) const noexcept {
    double sum = 0;
    for (const RateMeter& meter : meters_) sum += meter.per_second(now_ns);
    return sum;
  }
  // Input bytes per second, of all classes.
  [[nodiscard]] double bytes_per_second(std::int64_t now_ns) const noexcept {
    double sum = 0;
    for (const RateMeter& meter : meters_) sum += meter.bytes_per_second(now_ns);
    return sum;
  }

 private:
  static std::size_t index(shm::WirePriority priority) noexcept { return static_cast<std::size_t>(priority); }

  std::array<RateMeter, shm::kWirePriorities> meters_;
  std::array<std::uint64_t, shm::kWirePriorities> pass_taken_{};  // this pass's
  std::array<std::uint64_t, shm::kWirePriorities> pass_bytes_{};
};

}  // namespace batchd

// Which priority class each request of a run goes in: one class for all (--priority), or a mix
// by percent (--priority-mix high:10,normal:60,low:30).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "client_lib/client.hpp"

namespace batchd::stress {

inline constexpr std::array<Priority, kPriorityClasses> kAllPriorities = {Priority::kHigh, Priority::kNormal,
                                                                          Priority::kLow};

class PriorityMix {
 public:
  PriorityMix() = default;  // every request normal
  static PriorityMix single(Priority priority) noexcept;
  // "CLASS:PERCENT,...": each class (high, normal, low) at most once, whole percentages that add up
  // to 100; a class not named gets none. EINVAL and why for anything else.
  static Expected<PriorityMix> parse(std::string_view spec);

  // Request `id`'s class: a pure function of the run's seed and the id (a counter-based draw), so
  // every thread and lane agrees on it without sharing state, and the same --seed sends the same
  // classes again.
  [[nodiscard]] Priority pick(std::uint64_t seed, std::uint64_t id) const noexcept;
  [[nodiscard]] unsigned percent(Priority priority) const noexcept {
    return percent_[static_cast<std::size_t>(priority)];
  }
  // About how many of `total` requests go in this class (rounded up), for reserving samples.
  [[nodiscard]] std::size_t share(std::size_t total, Priority priority) const noexcept;
  // "normal:100", "high:10,normal:60,low:30": the classes it sends, for the report.
  [[nodiscard]] std::string describe() const;

 private:
  std::array<unsigned, kPriorityClasses> percent_{0, 100, 0};  // index: Priority
};

}  // namespace batchd::stress

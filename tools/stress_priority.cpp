#include "tools/stress_priority.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <numeric>
#include <optional>

namespace batchd::stress {

namespace {

Failure bad_mix(std::string why) {
  return make_failure(std::errc::invalid_argument, "--priority-mix: " + std::move(why));
}

// SplitMix64's finalizer: consecutive ids map to unrelated, evenly spread values.
std::uint64_t mix64(std::uint64_t x) noexcept {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

PriorityMix PriorityMix::single(Priority priority) noexcept {
  PriorityMix mix;
  mix.percent_ = {};
  mix.percent_[static_cast<std::size_t>(priority)] = 100;
  return mix;
}

Expected<PriorityMix> PriorityMix::parse(std::string_view spec) {
  PriorityMix mix;
  mix.percent_ = {};
  std::array<bool, kPriorityClasses> named{};
  if (spec.empty()) return bad_mix("expected CLASS:PERCENT,... such as high:10,normal:60,low:30");
  for (std::size_t start = 0; start <= spec.size();) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      // fmt, not operator+: GCC 12 at -O3 warns falsely (-Wrestrict) on "literal" + string here.
      return bad_mix(fmt::format("\"{}\" is not CLASS:PERCENT", item));
    }
    const std::string_view name = item.substr(0, colon);
    const std::optional<Priority> priority = parse_priority(name);
    if (!priority) {
      return bad_mix("unknown class \"" + std::string(name) + "\"; the classes are high, normal and low");
    }
    const std::string_view digits = item.substr(colon + 1);
    unsigned value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value > 100) {
      return bad_mix("the percentage of " + std::string(name) +
                     " must be a whole number from 0 to 100, not \"" + std::string(digits) + "\"");
    }
    const auto index = static_cast<std::size_t>(*priority);
    if (named[index]) return bad_mix(std::string(name) + " is named twice");
    named[index] = true;
    mix.percent_[index] = value;
  }
  const unsigned sum = std::accumulate(mix.percent_.begin(), mix.percent_.end(), 0U);
  if (sum != 100) return bad_mix("the percentages add up to " + std::to_string(sum) + ", not 100");
  return mix;
}

Priority PriorityMix::pick(std::uint64_t seed, std::uint64_t id) const noexcept {
  // Golden-ratio steps keep (seed, id) pairs apart before the finalizer spreads them.
  const std::uint64_t draw = mix64(seed + (id + 1) * 0x9E3779B97F4A7C15ULL) % 100;
  std::uint64_t below = 0;
  for (const Priority priority : kAllPriorities) {
    below += percent(priority);
    if (draw < below) return priority;
  }
  return Priority::kNormal;  // unreachable: the percentages add up to 100
}

std::size_t PriorityMix::share(std::size_t total, Priority priority) const noexcept {
  const unsigned p = percent(priority);
  return p == 0 ? 0 : total / 100 * p + (total % 100) * p / 100 + 1;
}

std::string PriorityMix::describe() const {
  std::string text;
  for (const Priority priority : kAllPriorities) {
    if (percent(priority) == 0) continue;
    if (!text.empty()) text += ',';
    text += priority_name(priority);
    text += ':' + std::to_string(percent(priority));
  }
  return text;
}

}  // namespace batchd::stress

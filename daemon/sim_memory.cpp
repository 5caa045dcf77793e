#include "daemon/sim_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace batchd {
namespace {

Failure bad_schedule(std::string_view text, std::string_view why) {
  return make_failure(std::errc::invalid_argument,
                      fmt::format("memory schedule '{}': {} (expected PERCENT:MS,PERCENT:MS,...)", text, why));
}

template <class T>
bool parse_number(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

Expected<std::vector<MemoryRamp>> parse_memory_schedule(std::string_view text) {
  std::vector<MemoryRamp> out;
  if (text.empty()) return out;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const std::size_t colon = item.find(':');
    MemoryRamp ramp;
    if (colon == std::string_view::npos || !parse_number(item.substr(0, colon), ramp.percent) ||
        !parse_number(item.substr(colon + 1), ramp.ms)) {
      return bad_schedule(text, fmt::format("'{}' is not PERCENT:MS", item));
    }
    if (!(ramp.percent >= 0 && ramp.percent <= 100)) {
      return bad_schedule(text, fmt::format("{} is not a percentage in [0, 100]", ramp.percent));
    }
    out.push_back(ramp);
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

double other_percent(const std::vector<MemoryRamp>& schedule, std::int64_t elapsed_ns) noexcept {
  if (schedule.empty()) return 0;
  std::int64_t period_ns = 0;
  for (const MemoryRamp& ramp : schedule) period_ns += std::int64_t{ramp.ms} * 1'000'000;
  double from = schedule.back().percent;
  if (period_ns == 0) return from;
  std::int64_t t = std::max<std::int64_t>(0, elapsed_ns) % period_ns;
  for (const MemoryRamp& ramp : schedule) {
    const std::int64_t ramp_ns = std::int64_t{ramp.ms} * 1'000'000;
    if (t < ramp_ns) {
      return from + (ramp.percent - from) * static_cast<double>(t) / static_cast<double>(ramp_ns);
    }
    t -= ramp_ns;
    from = ramp.percent;
  }
  return from;
}

SimMemory::SimMemory(unsigned devices, std::uint64_t total_bytes, std::uint64_t per_byte,
                     std::vector<MemoryRamp> other)
    : total_bytes_(total_bytes), per_byte_(per_byte), other_(std::move(other)),
      in_use_(std::make_unique<std::atomic<std::uint64_t>[]>(std::max(1U, devices))), devices_(devices) {}

std::uint64_t SimMemory::other_bytes(std::int64_t elapsed_ns) const noexcept {
  const double share = other_percent(other_, elapsed_ns) / 100.0;
  return std::min(total_bytes_, static_cast<std::uint64_t>(share * static_cast<double>(total_bytes_)));
}

bool SimMemory::try_charge(unsigned device, std::uint64_t need, std::int64_t elapsed_ns,
                           DeviceMemory& seen) noexcept {
  if (!limited() || device >= devices_) return true;
  const std::uint64_t other = other_bytes(elapsed_ns);
  std::atomic<std::uint64_t>& in_use = in_use_[device];
  std::uint64_t current = in_use.load(std::memory_order_relaxed);
  do {
    if (other + current > total_bytes_ || need > total_bytes_ - other - current) {
      seen = {total_bytes_, total_bytes_ - std::min(total_bytes_, other + current), current};
      return false;
    }
  } while (!in_use.compare_exchange_weak(current, current + need, std::memory_order_relaxed));
  return true;
}

void SimMemory::release(unsigned device, std::uint64_t need) noexcept {
  if (!limited() || device >= devices_) return;
  in_use_[device].fetch_sub(need, std::memory_order_relaxed);
}

DeviceMemory SimMemory::reading(unsigned device, std::int64_t elapsed_ns) const noexcept {
  if (!limited() || device >= devices_) return {};
  const std::uint64_t in_use = in_use_[device].load(std::memory_order_relaxed);
  const std::uint64_t used = std::min(total_bytes_, other_bytes(elapsed_ns) + in_use);
  return {total_bytes_, total_bytes_ - used, in_use};
}

}  // namespace batchd

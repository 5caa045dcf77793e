#include "daemon/memory_budget.hpp"

#include <algorithm>
#include <cmath>

namespace batchd {

std::int64_t memory_room_bytes(const DeviceMemory& memory, const MemoryFeedbackOptions& options,
                               bool batches_overlap) noexcept {
  if (!options.enabled || memory.total_bytes == 0) return kUnlimitedRoom;
  const std::uint64_t total = memory.total_bytes;
  const std::uint64_t in_use = total - std::min(memory.free_bytes, total);
  const std::uint64_t ours = batches_overlap ? 0 : std::min(memory.batch_bytes, in_use);
  const double high_water = std::clamp(options.high_water, 0.0, 1.0);
  const auto limit = static_cast<std::uint64_t>(std::floor(high_water * static_cast<double>(total)));
  // Device memory stays far below 2^63 bytes; clamped anyway so that no reading overflows.
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(kUnlimitedRoom) - 1;
  return static_cast<std::int64_t>(std::min(limit, kMax)) - static_cast<std::int64_t>(std::min(in_use - ours, kMax));
}

}  // namespace batchd

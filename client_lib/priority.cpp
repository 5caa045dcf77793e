// Priority classes: their names, and how the client writes them into a request slot.
#include "client_lib/client_segment.hpp"

namespace batchd {

std::string_view priority_name(Priority priority) noexcept {
  const auto index = static_cast<std::size_t>(priority);
  return index < kStatusClasses ? kStatusClassNames[index] : "unknown";
}

std::optional<Priority> parse_priority(std::string_view name) noexcept {
  for (const Priority p : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
    if (name == priority_name(p)) return p;
  }
  return std::nullopt;
}

namespace client_detail {

shm::WirePriority wire_priority(Priority priority) noexcept {
  switch (priority) {
    case Priority::kHigh: return shm::WirePriority::kHigh;
    case Priority::kLow: return shm::WirePriority::kLow;
    case Priority::kNormal: break;
  }
  return shm::WirePriority::kNormal;
}

Priority priority_of(shm::WirePriority wire) noexcept {
  switch (wire) {
    case shm::WirePriority::kHigh: return Priority::kHigh;
    case shm::WirePriority::kLow: return Priority::kLow;
    case shm::WirePriority::kNormal: break;
  }
  return Priority::kNormal;
}

}  // namespace client_detail

}  // namespace batchd

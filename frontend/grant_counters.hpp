// What the grant check did, for /metrics: claims run below the class asked for (by the class
// claimed and the class granted, as the daemon counts its own downgrades of local clients), and
// credentials that granted nothing. Shared by batchd-http (one set per event loop) and batchd-grpc.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "client_lib/client.hpp"

namespace batchd::grants {

// The downgrades that can happen: high to normal, high to low, normal to low.
inline constexpr std::size_t kDowngradePairs = 3;

struct GrantCounts {
  std::array<std::uint64_t, kDowngradePairs> downgrades{};
  std::uint64_t ignored_credentials = 0;

  GrantCounts& operator+=(const GrantCounts& other) noexcept;
  [[nodiscard]] std::uint64_t total_downgrades() const noexcept;
};

// Relaxed atomics: a reader wants a recent value, not a consistent cut.
class GrantCounters {
 public:
  // Precondition: granted is below claimed.
  void downgraded(Priority claimed, Priority granted) noexcept;
  void ignored_credential() noexcept { ignored_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] GrantCounts snapshot() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, kDowngradePairs> downgrades_{};
  std::atomic<std::uint64_t> ignored_{0};
};

// Appends <prefix>_priority_downgrades_total{claimed,granted} and
// <prefix>_priority_credentials_ignored_total in the Prometheus text format.
void render_grant_metrics(std::string& out, std::string_view prefix, const GrantCounts& counts);

}  // namespace batchd::grants

// How the router treats devices: its batch pool, when a running batch counts as hung, and how
// long an unhealthy device rests before it is probed again.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/device_health.hpp"
#include "daemon/memory_budget.hpp"

namespace batchd {

// Batches a device runs before it takes requests (docs/MODELS.md, "Warm-up"): a model's lazy
// initialisation is paid there, not by its first callers, and its cost fit starts from them.
// Rounds of batch_sizes in turn, of `inputs` cycled; none when batch_sizes is empty.
struct WarmupOptions {
  std::vector<std::uint32_t> batch_sizes;
  std::vector<std::string> inputs;
  unsigned rounds = 2;
  std::uint64_t max_batch_bytes = std::uint64_t{16} << 20;  // a batch stops growing here
  [[nodiscard]] bool enabled() const noexcept { return !batch_sizes.empty() && !inputs.empty(); }
};

struct RouterOptions {
  unsigned spare_batches = 2;  // batch objects beyond one per lane: the one filling and queued ones
  std::chrono::milliseconds device_timeout{2000};  // a batch running longer marks its device unhealthy
  // A backend that runs_inline() runs a batch on the drain thread while the batch's measured run
  // time (per-request average x its size) is at most this; 0 never. Longer runs would hold up
  // draining, and a lane worker's wake-up (tens of microseconds on a VM) no longer dominates.
  std::chrono::microseconds inline_run_max{50};
  BackoffPolicy backoff;
  // Devices come and go (worker processes): a batch no device can take now waits for one, within
  // its requests' deadlines, instead of failing "backend unavailable" at once.
  bool wait_for_devices = false;
  MemoryFeedbackOptions memory;  // --memory-feedback, --memory-high-water
  WarmupOptions warmup;
};

}  // namespace batchd

#include "client_lib/daemon_readiness.hpp"

namespace batchd {

namespace {

// The daemon publishes about every 50 ms; a page older than this means it is stuck.
constexpr std::int64_t kStatusStaleNs = 2'000'000'000;

}  // namespace

std::optional<NotReady> daemon_not_ready(const Client& client, std::uint64_t max_queue) {
  if (!client.connected()) return NotReady{"daemon_unavailable", "the batchd daemon is gone; re-attaching"};
  const DaemonStatus status = client.daemon_status();
  if (status.age_ns > kStatusStaleNs) {
    return NotReady{"daemon_stale", "the daemon has not published its status for " +
                                        std::to_string(status.age_ns / 1'000'000) + " ms"};
  }
  if (status.workers < status.min_workers) {
    return NotReady{"no_worker", "the daemon has " + std::to_string(status.workers) + " of the " +
                                     std::to_string(status.min_workers) + " worker(s) it needs attached (--min-workers)"};
  }
  // The page's devices are the default model's: unloaded (model control), it has none, and the
  // other models serve on.
  const bool default_unloaded = !status.models.empty() && (status.models.front().state == "unloaded" ||
                                                           status.models.front().state == "unloading" ||
                                                           status.models.front().state == "loading");
  if (status.healthy_devices == 0 && !default_unloaded) {
    return NotReady{"no_healthy_device", "the daemon has no healthy device"};
  }
  // The daemon is its model while it serves one; with more, each model's readiness says.
  if (status.models.size() == 1 && status.models.front().state == "warming") {
    return NotReady{"warming", "model " + status.models.front().name + " is warming up"};
  }
  if (status.in_flight >= max_queue) {
    return NotReady{"overloaded", "the daemon's queue holds " + std::to_string(status.in_flight) + " requests"};
  }
  return std::nullopt;
}

}  // namespace batchd

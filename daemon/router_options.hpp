// How the router treats devices: its batch pool, when a running batch counts as hung, and how
// long an unhealthy device rests before it is probed again.
#pragma once

#include <chrono>

#include "daemon/device_health.hpp"

namespace batchd {

struct RouterOptions {
  unsigned spare_batches = 2;  // batch objects beyond one per lane: the one filling and queued ones
  std::chrono::milliseconds device_timeout{2000};  // a batch running longer marks its device unhealthy
  BackoffPolicy backoff;
};

}  // namespace batchd

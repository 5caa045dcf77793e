// What the daemon publishes about itself, in the Prometheus text format (version 0.0.4): the one
// writer behind batchd-http's /metrics and the daemon's own --metrics-listen.
#pragma once

#include <string>

#include "status/daemon_status.hpp"

namespace batchd {

// Appends the daemon's series to `out`: batchd_daemon_up, then (when status is not nullptr, i.e.
// a daemon is attached) its counters, batch sizes, policy, devices and latency histograms.
void render_daemon_status(const DaemonStatus* status, std::string& out);

}  // namespace batchd

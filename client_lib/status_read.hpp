// Reads what a daemon publishes about itself (shm/status_page.hpp) into a DaemonStatus: for
// Client::daemon_status, and for the daemon's own metrics listener, which reads its page the same
// way so that both show the same numbers.
#pragma once

#include <cstddef>

#include "client_lib/client.hpp"
#include "shm/status_page.hpp"

namespace batchd {

// `file_bytes`: how much of the status file is mapped at `page` (at least shm::kStatusPageBytes).
// The latency histograms after the page are read only when the file holds them and their header
// matches this build's layout; otherwise DaemonStatus::latency_bounds_ns stays empty.
[[nodiscard]] DaemonStatus read_daemon_status(const shm::DaemonStatusPage& page, std::size_t file_bytes);

}  // namespace batchd

// Reads what a daemon publishes about itself (shm/status_page.hpp) into a DaemonStatus: for
// Client::daemon_status, and for the daemon's own metrics listener, which reads its page the same
// way so that both show the same numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "status/daemon_status.hpp"
#include "shm/status_page.hpp"

namespace batchd {

// `file_bytes`: how much of the status file is mapped at `page` (at least shm::kStatusPageBytes).
// The latency histograms after the page are read only when the file holds them and their header
// matches this build's layout; otherwise DaemonStatus::latency_bounds_ns stays empty.
[[nodiscard]] DaemonStatus read_daemon_status(const shm::DaemonStatusPage& page, std::size_t file_bytes);

// The id requests name the model `name` by, or nothing when the daemon serves no model of that
// name now. A daemon that publishes no models table serves shm::kDefaultModelName alone, as 0.
[[nodiscard]] std::optional<std::uint32_t> find_model_id(const shm::DaemonStatusPage& page, std::size_t file_bytes,
                                                         std::string_view name);
// The names of the models it serves, comma-separated: for an error that names a model it lacks.
[[nodiscard]] std::string served_model_names(const shm::DaemonStatusPage& page, std::size_t file_bytes);

}  // namespace batchd

// Builds the backend a configuration names: cpu, sim, cuda, plugin:PATH, or auto (cuda where a
// GPU is visible, else cpu).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "daemon/config.hpp"

namespace batchd {

// Throws std::runtime_error with a message for the operator when the backend cannot be made.
// Logs which backend was chosen and why.
std::unique_ptr<Backend> make_backend(const DaemonConfig& config);

}  // namespace batchd

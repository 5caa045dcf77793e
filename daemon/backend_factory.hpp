// Builds the backend a configuration names: cpu, sim, cuda, plugin:PATH, or auto (cuda where a
// GPU is visible, else cpu).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "base/expected.hpp"
#include "daemon/config.hpp"

namespace batchd {

// The backend, or a failure with a message for the operator (start-up turns it into an
// exception). Logs which backend was chosen and why.
Expected<std::unique_ptr<Backend>> make_backend(const ModelSettings& config);

}  // namespace batchd

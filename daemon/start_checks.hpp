// What the daemon checks before it starts anything: the segment's and each model's limits, the
// kernel's support for never-blocking doorbell reads, and enough open files for its clients.
// Each failure throws with a message for the operator, naming the flag to change.
#pragma once

#include "daemon/config.hpp"
#include "daemon/model_registry.hpp"

namespace batchd {

// Raises the process's open-file limit as far as allowed on the way. `max_attaching`: the
// handshakes in progress at once (AttachHandshake::kMaxAttaching).
void check_can_start(const DaemonConfig& config, const ModelRegistry& models, unsigned max_attaching);

}  // namespace batchd

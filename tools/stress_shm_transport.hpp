// The shared-memory transport: requests go through the client library to the daemon.
#pragma once

#include <memory>

#include "client_lib/client.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_transport.hpp"

namespace batchd::stress {

// Over `client`, which must outlive the transport and what it makes. Closed-loop callers submit
// synchronously; the open loop gets one lane, submitted to from its pacing thread while another
// thread polls the client (the client is thread-safe, and one client has one completion stream).
std::unique_ptr<Transport> make_shm_transport(Client& client, const Options& options,
                                              const InputPool& inputs);

}  // namespace batchd::stress

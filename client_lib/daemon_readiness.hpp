// Whether the daemon behind a client can take work now, judged from what it publishes: the rule
// every front-end's readiness check (batchd-http's /readyz and /v2/health/ready, batchd-grpc's
// ServerReady) shares, so none of them says ready while another says not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "client_lib/client.hpp"

namespace batchd {

struct NotReady {
  std::string_view code;  // "daemon_unavailable", "daemon_stale", "no_worker", "no_healthy_device", "overloaded"
  std::string message;    // for a person
};

// Nothing when the client is attached and its daemon is fresh, has its workers and a healthy
// device, and holds fewer than `max_queue` requests; otherwise why not.
std::optional<NotReady> daemon_not_ready(const Client& client, std::uint64_t max_queue);

}  // namespace batchd

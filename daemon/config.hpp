// Everything the daemon is told at start: from flags (and later the config file).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/batcher.hpp"
#include "daemon/dead_letter_log.hpp"
#include "daemon/router_options.hpp"
#include "daemon/sim_backend.hpp"
#include "shm/layout.hpp"

namespace batchd {

struct DaemonConfig {
  std::string socket_path;            // empty: default_socket_path()
  shm::SegmentParams segment;         // per-client slots and payload limits
  BatchLimits batch;                  // the wait-or-full policy
  std::string backend = "cpu";
  unsigned cost = 1;                  // SHA-256 rounds per input (cpu backend)
  unsigned cpu_threads = 1;           // cpu backend workers (one device each)
  std::vector<int> cuda_devices;      // cuda backend: empty means every visible device
  unsigned streams_per_device = 2;    // cuda backend
  std::string plugin_config;          // passed to a plug-in's init
  SimOptions sim;                     // sim backend
  RouterOptions routing;
  unsigned max_clients = 256;          // attached clients; handshakes are bounded apart
  unsigned max_clients_per_uid = 128;  // attached clients of one user
  std::uint32_t attach_timeout_ms = 2000;  // a connection's hello must arrive within this
  std::vector<uid_t> allowed_uids;    // besides the daemon's own uid
  std::vector<gid_t> allowed_gids;
  std::uint32_t drain_spin_us = 20;   // busy-poll this long before the drain loop sleeps
  DeadLetterOptions dead_letters;     // requests whose input fails alone: where they are recorded
  std::string metrics_listen;         // ADDR:PORT for GET /metrics (metrics_listener.hpp); empty: none
};

// $XDG_RUNTIME_DIR/batchd/batchd.sock, or /run/batchd/batchd.sock as root (or with no
// XDG_RUNTIME_DIR).
std::string default_socket_path();

}  // namespace batchd

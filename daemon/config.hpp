// Everything the daemon is told at start: from flags (and later the config file).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/batcher.hpp"
#include "daemon/dead_letter_log.hpp"
#include "daemon/router_options.hpp"
#include "daemon/sim_backend.hpp"
#include "shm/layout.hpp"
#include "shm/status_page.hpp"
#include "tracing/trace_options.hpp"

namespace batchd {

// --backend workers: worker processes attach as devices (docs/WORKERS.md).
struct WorkerConfig {
  unsigned max_workers = 8;        // places (devices) for workers
  unsigned lanes_per_worker = 4;   // streams per place: batches one worker runs at once at most
  unsigned min_workers = 1;        // attached before the daemon says it is ready
  std::chrono::microseconds spin{50};  // a lane spins this long for an answer, then sleeps
  // Who may attach as a worker besides the daemon's own user. Apart from the clients' grant: a
  // worker sees every client's inputs.
  std::vector<uid_t> allowed_uids;
  std::vector<gid_t> allowed_gids;
};

// How one model runs and how its requests are batched: the keys a [models.NAME] table of the
// config file (or --model NAME:KEY=VALUE) may set. DaemonConfig's own are the defaults, and the
// default model's (batchstring).
struct ModelSettings {
  BatchLimits batch;                  // the wait-or-full policy
  std::string backend = "cpu";
  unsigned cost = 1;                  // SHA-256 rounds per input (cpu backend)
  unsigned cpu_threads = 1;           // cpu backend workers (one device each)
  std::vector<int> cuda_devices;      // cuda backend: empty means every visible device
  unsigned streams_per_device = 2;    // cuda backend
  std::string plugin_config;          // passed to a plug-in's init
  SimOptions sim;                     // sim backend
  RouterOptions routing;
  // While two or more tenants (users) or priority classes are active, a batch closes before its
  // predicted run would pass this (or twice the device's fixed cost, if more), so a tenant of
  // large inputs cannot hold the lanes for long while another's request waits. 0: batches are
  // cut by the policy only.
  std::uint32_t fair_slice_us = 250;
  // The floor share of what is served (by cost) that normal and low keep while they have waiting
  // requests, in percent: a flood at a granted class slows them, never starves them.
  std::uint32_t normal_floor_percent = 10;
  std::uint32_t low_floor_percent = 10;
  WorkerConfig workers;
  // The response cache (docs/CACHE.md). Only the operator knows a model is pure (the same input
  // always gets the same answer): then its successful answers are kept in shared memory, where
  // clients find them without a round trip, and identical requests in flight run once.
  bool cache = false;
  // Who shares the cached answers: kUser, the clients of one uid (a hit tells a client that
  // another of its own user asked the same); kAll, every client (any user learns what any other
  // asked, and can read every cached answer).
  enum class CacheScope : std::uint8_t { kUser, kAll };
  CacheScope cache_scope = CacheScope::kUser;
  // Identical requests in flight run once (a pure model's): on with the cache unless set.
  std::optional<bool> coalesce;
  [[nodiscard]] bool coalesces() const noexcept { return coalesce.value_or(cache); }
};

// The name every daemon serves unless configured otherwise: the reference batchstring, with the
// top-level settings.
inline constexpr const char* kDefaultModelName = shm::kDefaultModelName;

// Models per daemon (batchstring included), and a name's longest: the status file's table.
inline constexpr std::size_t kMaxModels = shm::kStatusModels;
inline constexpr std::size_t kMaxModelNameBytes = shm::kStatusModelNameWords * 8 - 1;

// A model the daemon serves besides the default one, by name (docs/MODELS.md).
struct ModelConfig {
  std::string name;
  std::string version = "1";
  ModelSettings settings;
};

struct DaemonConfig : ModelSettings {
  std::string socket_path;            // empty: default_socket_path()
  shm::SegmentParams segment;         // per-client slots and payload limits
  unsigned max_clients = 256;          // attached clients; handshakes are bounded apart
  unsigned max_clients_per_uid = 128;  // attached clients of one user
  std::uint32_t attach_timeout_ms = 2000;  // a connection's hello must arrive within this
  std::vector<uid_t> allowed_uids;    // besides the daemon's own uid
  std::vector<gid_t> allowed_gids;
  // Who may run requests at high priority, besides the daemon's own uid: a grant of the
  // operator's, never a client's claim. Others' high requests run at normal.
  std::vector<uid_t> high_priority_uids;
  std::vector<gid_t> high_priority_gids;
  // Whether the control socket refuses descriptors in the kernel (SO_PASSRIGHTS, Linux 6.16)
  // where it can. Tests turn it off to reach the older kernels' path: received, then closed on
  // the reaper.
  bool refuse_passed_fds = true;
  std::uint32_t drain_spin_us = 20;   // busy-poll this long before the drain loop sleeps
  DeadLetterOptions dead_letters;     // requests whose input fails alone: where they are recorded
  std::string metrics_listen;         // ADDR:PORT for GET /metrics (status/metrics_listener.hpp); empty: none
  std::string default_model_version = "1";  // batchstring's version
  // The response caches' memory in all, split evenly between the all-users segment and up to
  // cache_users per-user ones (pages are used only as answers are stored). 0: no cache anywhere.
  std::uint64_t cache_bytes = 320ULL << 20;
  unsigned cache_users = 4;
  bool cache_test_one_bucket = false;  // tests: every key hashes alike (shm::CacheHash::kOneValue)
  tracing::TraceOptions tracing;  // OpenTelemetry traces of requests (docs/TRACING.md)
  // The models served besides batchstring (model id 0), in id order from 1.
  std::vector<ModelConfig> models;
};

// $XDG_RUNTIME_DIR/batchd/batchd.sock, or /run/batchd/batchd.sock as root (or with no
// XDG_RUNTIME_DIR).
std::string default_socket_path();

}  // namespace batchd

// The two ways of loading the daemon. Closed loop: each thread waits for its answer before
// sending again, so it measures service time under a fixed concurrency. Open loop: requests go
// out at a fixed rate whatever happens, and latency counts from when each was meant to be sent,
// so a daemon that falls behind cannot hide its queue (no coordinated omission).
#pragma once

#include <atomic>
#include <cstdint>

#include "client_lib/client.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

struct RunContext {
  Client& client;
  const Options& options;
  const InputPool& inputs;
  LiveStats& live;
  const std::atomic<bool>& interrupted;  // set from a signal handler: wind down early
  std::int64_t start_ns = 0;             // set by the loop when it starts sending
};

struct RunResult {
  Tally tally;
  double wall_s = 0.0;  // from the first send until the last request finished
};

// When a run that started at start_ns stops sending: after --duration, or never without one.
std::int64_t run_end_ns(const Options& options, std::int64_t start_ns);
// Latency samples one closed-loop thread reserves up front, so its vector rarely grows mid-run.
std::size_t closed_samples_to_reserve(const Options& options);

RunResult run_closed_loop(RunContext& ctx);
RunResult run_open_loop(RunContext& ctx);

}  // namespace batchd::stress

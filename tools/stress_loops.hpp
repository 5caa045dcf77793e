// The two ways of loading a server, over any transport (tools/stress_transport.hpp). Closed
// loop: each thread waits for its answer before sending again, so it measures service time under
// a fixed concurrency. Open loop: requests go out at a fixed rate whatever happens, and latency
// counts from when each was meant to be sent, so a server that falls behind cannot hide its
// queue (no coordinated omission).
#pragma once

#include <atomic>
#include <cstdint>

#include "tools/stress_inputs.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_stats.hpp"
#include "tools/stress_transport.hpp"

namespace batchd::stress {

struct RunContext {
  const Options& options;
  const InputPool& inputs;
  LiveStats& live;
  const std::atomic<bool>& interrupted;  // set from a signal handler: wind down early
  std::int64_t start_ns = 0;             // set by the loop when it starts sending
};

struct RunResult {
  Tallies tallies;
  double wall_s = 0.0;  // from the first send until the last request finished
};

// Latency samples one closed-loop thread reserves up front, so its vector rarely grows mid-run.
std::size_t closed_samples_to_reserve(const Options& options);

RunResult run_closed_loop(RunContext& ctx, Transport& transport);
RunResult run_open_loop(RunContext& ctx, Transport& transport);

}  // namespace batchd::stress

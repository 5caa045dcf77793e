#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tools/stress_clock.hpp"
#include "tools/stress_loops.hpp"

namespace batchd::stress {

// Bounded so thousands of threads do not reserve gigabytes between them.
std::size_t closed_samples_to_reserve(const Options& options) {
  const std::size_t budget = (std::size_t{1} << 24) / options.threads;
  if (options.requests) return std::min<std::size_t>(budget, *options.requests / options.threads + 1);
  return std::min<std::size_t>(budget, std::size_t{1} << 20);
}

namespace {

std::int64_t run_end_ns(const Options& options, std::int64_t start_ns) {
  if (!options.duration_s) return std::numeric_limits<std::int64_t>::max();
  return start_ns + static_cast<std::int64_t>(*options.duration_s * 1e9);
}

void closed_worker(RunContext& ctx, const Transport& transport, Caller& caller,
                   std::atomic<std::uint64_t>& next_id, Tally& tally) {
  Recorder recorder(tally, ctx.live, ctx.options.cost, ctx.options.sim_repeat);
  const std::uint64_t cap = ctx.options.requests.value_or(std::numeric_limits<std::uint64_t>::max());
  const std::int64_t end_ns = run_end_ns(ctx.options, ctx.start_ns);
  std::string input;
  input.reserve(ctx.inputs.max_bytes());
  tally.latencies_ns.reserve(closed_samples_to_reserve(ctx.options));
  for (;;) {
    if (now_ns() >= end_ns || !transport.reachable() ||
        ctx.interrupted.load(std::memory_order_relaxed)) {
      break;
    }
    const std::uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    if (id >= cap) break;
    ctx.inputs.build(id, input);
    recorder.sent();
    const std::int64_t sent_ns = now_ns();
    const Outcome outcome = caller.call(input);
    const std::int64_t done_ns = now_ns();
    if (outcome.answered) {
      recorder.answered(input, outcome.output, done_ns - sent_ns);
    } else {
      recorder.failed_kind(outcome.error_kind);
    }
  }
}

}  // namespace

RunResult run_closed_loop(RunContext& ctx, Transport& transport) {
  const unsigned threads = ctx.options.threads;
  std::vector<std::unique_ptr<Caller>> callers;
  callers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) callers.push_back(transport.make_caller(t));
  std::vector<Tally> tallies(threads);
  std::atomic<std::uint64_t> next_id{0};
  ctx.start_ns = now_ns();
  {
    std::vector<std::jthread> workers;
    workers.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&ctx, &transport, &callers, &next_id, &tallies, t] {
        closed_worker(ctx, transport, *callers[t], next_id, tallies[t]);
      });
    }
  }
  RunResult result;
  result.wall_s = static_cast<double>(now_ns() - ctx.start_ns) / 1e9;
  for (Tally& tally : tallies) result.tally.merge(std::move(tally));
  return result;
}

}  // namespace batchd::stress

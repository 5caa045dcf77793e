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
                   std::atomic<std::uint64_t>& next_id, Tallies& tallies) {
  const Options& o = ctx.options;
  Recorder recorder(tallies, ctx.live, o.cost, o.sim_repeat, o.expected_outputs());
  const std::uint64_t cap = o.requests.value_or(std::numeric_limits<std::uint64_t>::max());
  const std::int64_t end_ns = run_end_ns(o, ctx.start_ns);
  std::string input;
  input.reserve(ctx.inputs.max_bytes());
  for (const Priority p : kAllPriorities) {
    tallies[p].latencies_ns.reserve(o.priority_mix.share(closed_samples_to_reserve(o), p));
  }
  for (;;) {
    if (now_ns() >= end_ns || !transport.reachable() ||
        ctx.interrupted.load(std::memory_order_relaxed)) {
      break;
    }
    const std::uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    if (id >= cap) break;
    ctx.inputs.build(id, input);
    const Priority priority = o.priority_mix.pick(o.seed, id);
    recorder.sent(priority);
    const std::int64_t sent_ns = now_ns();
    const Outcome outcome = caller.call(input, RequestOptions{priority, o.model_for(id)});
    const std::int64_t done_ns = now_ns();
    if (outcome.answered) {
      recorder.answered(priority, input, outcome.output, done_ns - sent_ns);
    } else {
      recorder.failed_kind(priority, outcome.error_kind);
    }
  }
}

}  // namespace

RunResult run_closed_loop(RunContext& ctx, Transport& transport) {
  const unsigned threads = ctx.options.threads;
  std::vector<std::unique_ptr<Caller>> callers;
  callers.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) callers.push_back(transport.make_caller(t));
  std::vector<Tallies> tallies(threads);
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
  for (Tallies& thread_tallies : tallies) result.tallies.merge(std::move(thread_tallies));
  return result;
}

}  // namespace batchd::stress

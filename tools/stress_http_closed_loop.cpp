// Closed loop over HTTP: each thread owns its keep-alive connections (used in turn) and waits
// for each answer before it sends again.
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tools/stress_clock.hpp"
#include "tools/stress_http_loops.hpp"

namespace batchd::stress {

namespace {

bool keep_going(const HttpRunContext& ctx, std::int64_t end_ns) {
  return now_ns() < end_ns && !ctx.interrupted.load(std::memory_order_relaxed);
}

void http_closed_worker(HttpRunContext& ctx, std::vector<http::SyncConnection>& connections,
                        std::atomic<std::uint64_t>& next_id, Tally& tally) {
  Recorder recorder(tally, ctx.live, ctx.options.cost, ctx.options.sim_repeat);
  http::RequestEncoder encoder(ctx.url, ctx.options.http_timeout);
  http::BodyDecoder decoder;
  const std::uint64_t cap = ctx.options.requests.value_or(std::numeric_limits<std::uint64_t>::max());
  const std::int64_t end_ns = run_end_ns(ctx.options, ctx.start_ns);
  const std::int64_t deadline_ns = http_client_deadline(ctx.options).count();
  std::string input, request;
  input.reserve(ctx.inputs.max_bytes());
  tally.latencies_ns.reserve(closed_samples_to_reserve(ctx.options));
  for (std::size_t turn = 0; keep_going(ctx, end_ns); ++turn) {
    const std::uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
    if (id >= cap) break;
    ctx.inputs.build(id, input);
    request.clear();
    encoder.append(request, input);
    recorder.sent();
    const std::int64_t sent_ns = now_ns();
    const http::Exchange ex =
        connections[turn % connections.size()].exchange(request, sent_ns + deadline_ns);
    const std::int64_t done_ns = now_ns();
    if (ex.responded) {
      record_response(recorder, decoder, ex.status, ex.body, input, done_ns - sent_ns);
    } else {
      recorder.failed_kind(ex.error_kind);
    }
  }
}

// Thread t owns connections t, t + threads, t + 2 * threads, ...
std::vector<std::vector<http::SyncConnection>> deal_connections(HttpRunContext& ctx) {
  std::vector<std::vector<http::SyncConnection>> owned(ctx.options.threads);
  for (std::size_t i = 0; i < ctx.fds.size(); ++i) {
    owned[i % owned.size()].emplace_back(ctx.endpoint, ctx.fds[i]);
  }
  ctx.fds.clear();  // the connections own them now
  return owned;
}

}  // namespace

RunResult run_http_closed_loop(HttpRunContext& ctx) {
  std::vector<std::vector<http::SyncConnection>> owned = deal_connections(ctx);
  std::vector<Tally> tallies(ctx.options.threads);
  std::atomic<std::uint64_t> next_id{0};
  ctx.start_ns = now_ns();
  {
    std::vector<std::jthread> workers;
    workers.reserve(ctx.options.threads);
    for (std::size_t t = 0; t < tallies.size(); ++t) {
      workers.emplace_back([&ctx, &owned, &next_id, &tallies, t] {
        http_closed_worker(ctx, owned[t], next_id, tallies[t]);
      });
    }
  }
  RunResult result;
  result.wall_s = static_cast<double>(now_ns() - ctx.start_ns) / 1e9;
  for (Tally& tally : tallies) result.tally.merge(std::move(tally));
  return result;
}

}  // namespace batchd::stress

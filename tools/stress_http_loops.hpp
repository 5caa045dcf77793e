// The closed and open loops of tools/stress_loops.hpp, over HTTP to a front-end such as
// batchd-http: the same pacing, answer checks and tallies, with keep-alive connections instead
// of the shared-memory client.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "tools/stress_http_conn.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_loops.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

struct HttpRunContext {
  const http::Url& url;
  const http::Endpoint& endpoint;
  std::vector<int> fds;  // options.connections open connections, taken over by the loop
  const Options& options;
  const InputPool& inputs;
  LiveStats& live;
  const std::atomic<bool>& interrupted;  // set from a signal handler: wind down early
  std::int64_t start_ns = 0;             // set by the loop when it starts sending
};

// How long the client waits for an answer. The server was told options.http_timeout; when it
// is not shorter than our own timeout, we allow it a grace period to answer 504 itself, so a
// timeout it reports is counted as the server's, not lost to a race.
std::chrono::nanoseconds http_client_deadline(const Options& options);

// Counts one response: an answer is checked against the reference and its latency kept, an
// error response counted by its kind.
void record_response(Recorder& recorder, http::BodyDecoder& decoder, int status,
                     std::string_view body, std::string_view input, std::int64_t latency_ns);

RunResult run_http_closed_loop(HttpRunContext& ctx);
RunResult run_http_open_loop(HttpRunContext& ctx);

}  // namespace batchd::stress

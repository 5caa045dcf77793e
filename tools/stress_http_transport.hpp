// The HTTP transport: requests go as POST {"input": ...} (or, with --protocol v2, the Open
// Inference Protocol's JSON tensor) over keep-alive connections to a front-end such as
// batchd-http (or any server with the same contract, docs/HTTP.md).
// Closed-loop callers each own some connections and use them in turn; open-loop lanes (one per
// --io-threads) each drive their share of the connections with epoll and pipeline requests.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "tools/stress_http_conn.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_transport.hpp"

namespace batchd::stress {

// What every connection of a run shares; all of it outlives the transport.
struct HttpTarget {
  const http::Url& url;
  const http::Endpoint& endpoint;
  const Options& options;
  const InputPool& inputs;
};

// The run's open connections, dealt out in shares: share k of n is connections k, k + n, ...
// (options guarantee every share at least one); those never dealt are closed with it.
class ConnectionShares {
 public:
  explicit ConnectionShares(std::vector<int> fds) : fds_(std::move(fds)) {}
  ~ConnectionShares();
  ConnectionShares(const ConnectionShares&) = delete;
  ConnectionShares& operator=(const ConnectionShares&) = delete;
  std::vector<int> deal(unsigned index, unsigned stride);

 private:
  std::vector<int> fds_;  // -1 once dealt
};

// Takes over `fds`, options.connections connections already open to target.endpoint: thread
// t's caller gets connections t, t + threads, ...; lane k's, k, k + lanes, ...
std::unique_ptr<Transport> make_http_transport(const HttpTarget& target, std::vector<int> fds);

// How long the client waits for an answer. The server was told options.http_timeout; when it
// is not shorter than our own timeout, we allow it a grace period to answer 504 itself, so a
// timeout it reports is counted as the server's, not lost to a race.
std::chrono::nanoseconds http_client_deadline(const Options& options);

// Open loop: a lane over `fds` (taken over), in stress_http_lane.cpp.
std::unique_ptr<OpenLane> make_http_lane(const HttpTarget& target, std::vector<int> fds);

}  // namespace batchd::stress

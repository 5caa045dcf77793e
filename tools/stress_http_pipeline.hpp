// One non-blocking keep-alive connection of the HTTP open loop: its buffers and the FIFO of
// requests sent on it. HTTP/1.1 answers pipelined requests in order, so the front of the FIFO
// is the request the next response answers.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "client_lib/client.hpp"
#include "tools/stress_http_response.hpp"

namespace batchd::stress::http {

struct Pending {
  std::uint64_t id = 0;
  std::int64_t intended_ns = 0;  // when the schedule meant it to go: latency counts from here
  std::int64_t sent_ns = 0;      // when it was written: the client-side deadline counts from here
  Priority priority = Priority::kNormal;  // sent as X-Priority (again, if the request is re-sent)
};

enum class IoStatus { kOk, kClosed, kError };

struct PipeConnection {
  enum class State { kClosed, kConnecting, kOpen };

  State state = State::kClosed;
  int fd = -1;
  std::int64_t retry_ns = 0;  // closed: the earliest time to reconnect
  bool wants_out = false;     // EPOLLOUT is in the epoll interest set
  std::deque<Pending> inflight;
  std::string out;            // requests not yet written, from out_done on
  std::size_t out_done = 0;
  std::string in;             // bytes received and not yet taken by the reader
  ResponseReader reader;      // the response being read

  // Reads all there is. kClosed: the peer closed; kError: a socket error (errno says which).
  // Bytes received before either are kept in `in`.
  IoStatus fill();
  // Writes what it can of `out`. kOk with out empty: all written; kOk otherwise: the socket is full.
  IoStatus flush();
  // Closes the socket and forgets the buffers and any response in progress; inflight is the
  // caller's to settle first.
  void close_socket() noexcept;
  [[nodiscard]] bool writes_pending() const noexcept { return out_done < out.size(); }
};

}  // namespace batchd::stress::http

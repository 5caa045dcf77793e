// Sockets for batchd-stress's HTTP transport: resolving the front-end's address, connecting,
// and the one-request-at-a-time keep-alive exchange the closed loop uses.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_http_response.hpp"

namespace batchd::stress::http {

struct Endpoint {
  sockaddr_storage address{};
  socklen_t length = 0;
  std::string text;  // "host:port" for messages
};

// Resolves url's host and port to the first address getaddrinfo gives (EHOSTUNREACH and
// getaddrinfo's reason when it gives none).
Expected<Endpoint> resolve(const Url& url);

// Each failure below says "cannot connect to HOST:PORT: why", with the errno as its code.

// A non-blocking TCP socket (TCP_NODELAY) whose connect has started; the caller owns it.
Expected<int> start_connect(const Endpoint& endpoint);
// The outcome of a started connect once the socket is writable.
Expected<void> connect_result(int fd, const Endpoint& endpoint);
// Opens n connections, all connected within `timeout` each, or none; the caller owns them.
Expected<std::vector<int>> connect_all(const Endpoint& endpoint, unsigned n,
                                       std::chrono::milliseconds timeout);

// Prints each distinct problem once on stderr: a broken server would otherwise have it printed
// for every request. Any thread.
void warn_once(std::string_view problem);

// One request's fate on a synchronous connection.
struct Exchange {
  bool responded = false;      // a whole response came back: status and body are set
  std::size_t error_kind = 0;  // otherwise why not (timeout, daemon_unavailable, protocol_error)
  int status = 0;
  std::string_view body;       // valid until the next exchange
};

// A keep-alive connection used by one thread for one request at a time. Reconnects when the
// server closed it or it broke, no more often than every 100 ms. Not movable (Beast's parser is
// not): keep them in a container that never moves its elements.
class SyncConnection {
 public:
  // fd: an open connection to endpoint to start with, or -1.
  SyncConnection(const Endpoint& endpoint, int fd) : endpoint_(&endpoint), fd_(fd) {}
  ~SyncConnection() { close_fd(); }
  SyncConnection(const SyncConnection&) = delete;
  SyncConnection& operator=(const SyncConnection&) = delete;

  // Sends one encoded request and waits for its response until deadline_ns (now_ns's clock).
  Exchange exchange(std::string_view request, std::int64_t deadline_ns);

 private:
  bool ensure_connected(std::int64_t deadline_ns);
  bool send_all(std::string_view request, std::int64_t deadline_ns);
  Exchange read_response(std::int64_t deadline_ns);
  Exchange responded();
  enum class Received { kData, kEof, kError };
  // Reads what is there into in_.
  Received read_some();
  void close_fd() noexcept;

  const Endpoint* endpoint_;
  int fd_;
  std::int64_t retry_ns_ = 0;  // no reconnect before this, so a dead server is not hammered
  std::string in_;             // received bytes the reader has not taken yet
  ResponseReader reader_;      // holds the last response, so Exchange::body can point into it
  bool close_after_last_ = false;  // the server asked to close, or sent more than was asked
};

}  // namespace batchd::stress::http

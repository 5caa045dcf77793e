// Shared by the HTTP tests: the batchd-http binary run as a child process, a small blocking HTTP
// client over plain sockets (responses parsed by Beast), and request builders.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/helpers.hpp"

namespace batchd::test {

// A loopback TCP port nothing listens on now, for a process whose port must be known before it
// starts (a balancer's config, a redis-server), so it cannot bind port 0 itself.
std::uint16_t free_port();

// The batchd-http binary built next to the tests (BATCHD_HTTP_BIN, set by meson).
std::string http_binary();

// The port a server wrote to its --port-file; nothing until it has written it whole.
std::optional<std::uint16_t> read_port(const std::string& path);

// Runs batchd-http on 127.0.0.1 with a free port (--listen 127.0.0.1:0 --port-file).
class FrontendProcess {
 public:
  // Starts it against `daemon_socket` with extra args and waits until it listens; with
  // wait_ready, also until GET /readyz answers 200.
  FrontendProcess(const std::string& daemon_socket, const std::vector<std::string>& args,
                  bool wait_ready = true);
  ~FrontendProcess();
  FrontendProcess(const FrontendProcess&) = delete;
  FrontendProcess& operator=(const FrontendProcess&) = delete;

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // Polls GET /readyz until it answers 200; false after the timeout.
  [[nodiscard]] bool wait_ready(std::chrono::milliseconds timeout) const;
  void signal(int sig) const;
  // Waits for the process to exit and returns its waitpid status; -1 if it did not in time.
  int wait_exit(std::chrono::milliseconds timeout);
  // SIGTERM, then the exit status.
  int stop();

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

struct HttpResponse {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  bool keep_alive = true;

  [[nodiscard]] std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A blocking client connection with timeouts. Throws std::runtime_error on connect failure.
class HttpClient {
 public:
  explicit HttpClient(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends all bytes; false if the peer is gone.
  bool send(std::string_view bytes);
  // The next response, or nothing on EOF, a timeout or a parse error. head: it answers a HEAD.
  std::optional<HttpResponse> read_response(bool head = false);
  // Sends a request and reads its response.
  std::optional<HttpResponse> round_trip(std::string_view request, bool head = false);
  // True if the server closes the connection (EOF or reset) within the timeout, discarding data.
  bool wait_closed(std::chrono::milliseconds timeout);
  // Closes at once with a reset (SO_LINGER 0) instead of a FIN.
  void reset();
  void close();
  [[nodiscard]] int fd() const noexcept { return fd_; }

 private:
  int fd_ = -1;
  std::string buffered_;  // received, not yet parsed
};

// An HTTP/1.1 request with Host and Content-Length; headers are "Name: value" lines.
std::string make_request(std::string_view method, std::string_view target, std::string_view body = {},
                         const std::vector<std::string>& headers = {});
// POST /v1/batchstring with {"input": input}, escaped.
std::string batch_request(std::string_view input, const std::vector<std::string>& headers = {});
// {"output":"<hex SHA-256 of input>"}, the body a cost-1 cpu daemon answers with.
std::string expected_json_output(std::string_view input);
// The machine-readable code of an error body ({"error":{"code":...}}), or "" if it has none.
std::string error_code_of(const std::string& body);
// Checks that `r` is a /v1 error: `status`, a JSON body with this code and a message.
void check_error(const HttpResponse& r, unsigned status, const std::string& code);

}  // namespace batchd::test

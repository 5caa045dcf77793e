// The daemon's own Prometheus endpoint (--metrics-listen ADDR:PORT), for deployments that reach
// the daemon over shared memory only, without batchd-http; batchd-grpc serves its own with it.
// GET /metrics answers what the status page holds, in the same text as batchd-http's /metrics
// (status/status_metrics.hpp).
//
// A scraper is a network peer, so it must never hold the daemon up: the listener is a thread of its
// own, its sockets are non-blocking, each connection has kDeadline for the whole exchange, at most
// kMaxConnections are open (more are closed at once), a request may be kMaxRequestBytes long, and
// each connection answers one request and closes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "shm/fd.hpp"
#include "text/listen_address.hpp"

namespace batchd {

class MetricsListener {
 public:
  static constexpr std::chrono::milliseconds kDeadline{2000};
  static constexpr unsigned kMaxConnections = 8;
  static constexpr std::size_t kMaxRequestBytes = 8192;

  // Produces the text GET /metrics answers; called on the listener's thread.
  using Render = std::function<std::string()>;

  // Binds and listens; throws std::system_error with the address's trouble (start-up).
  MetricsListener(const ListenAddress& address, Render render);
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;
  ~MetricsListener();  // stops the thread, closes every connection

  void start();
  // The bound port (the kernel's choice when the address asked for port 0).
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }

 private:
  void run() noexcept;

  Render render_;
  shm::UniqueFd listen_fd_;
  shm::UniqueFd stop_fd_;  // eventfd: the destructor wakes the thread with it
  std::uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace batchd

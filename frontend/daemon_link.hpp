// One event loop's attachment to the daemon. Client::connect blocks (up to its connect timeout),
// and a loop must never block, so a background thread does the connecting and hands the attached
// client over; the loop serves 503s meanwhile, so the front-end may start before the daemon.
// Once attached, the client itself re-attaches across daemon restarts.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client_lib/client.hpp"

namespace batchd::http {

class DaemonLink {
 public:
  // Starts attaching at once. `wake_fd` is an eventfd the loop reads: it is written once a client
  // is ready to adopt. Neither is owned.
  DaemonLink(ClientOptions options, int wake_fd);
  ~DaemonLink();
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // The attached client, or nullptr. Loop thread only, like everything below.
  [[nodiscard]] Client* client() noexcept { return client_.get(); }
  // Takes the client the connector attached, if there is one; true if it did.
  bool adopt();
  // Why the last attempt failed, for /readyz.
  [[nodiscard]] std::string last_error() const;
  [[nodiscard]] const std::string& socket_path() const noexcept { return options_.socket_path; }

 private:
  void start_connector();
  void connect_until_attached();

  ClientOptions options_;
  int wake_fd_;
  std::unique_ptr<Client> client_;  // the loop's; the connector never touches it
  std::thread connector_;

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::unique_ptr<Client> attached_;  // guarded by mu_: handed from the connector to the loop
  std::string last_error_;            // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
};

}  // namespace batchd::http

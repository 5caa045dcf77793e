// batchd-grpc's clients of the daemon. Each has a thread of its own that attaches (retrying until
// the daemon is there, so the front-end may start first) and then waits on the client's eventfd
// and polls it: the answers' callbacks, which finish RPCs, run there. RPC handlers never wait on
// the daemon; they submit and return.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "client_lib/daemon_readiness.hpp"

namespace batchd::grpcfront {

class DaemonPool {
 public:
  DaemonPool(const ClientOptions& options, unsigned clients);
  ~DaemonPool();
  DaemonPool(const DaemonPool&) = delete;
  DaemonPool& operator=(const DaemonPool&) = delete;

  // An attached client to submit to (round robin), or nullptr while none is. Any thread.
  Client* pick() noexcept;
  // Nothing when every client is attached and the daemon can take work; else why not. Any thread.
  std::optional<NotReady> not_ready(std::uint64_t max_queue);
  // Stops the threads (after the server has finished its RPCs: answers still owed are lost).
  void stop();

 private:
  struct Member {
    std::thread thread;
    std::unique_ptr<Client> owned;       // written by the member's thread before `client` is set
    std::atomic<Client*> client{nullptr};
    std::mutex mu;
    std::string last_error = "not attached yet";  // guarded by mu
  };

  void run(Member& member);
  bool attach(Member& member);
  void pump(Client& client);

  ClientOptions options_;
  std::vector<std::unique_ptr<Member>> members_;
  std::atomic<unsigned> next_{0};
  std::atomic<bool> stop_{false};
  int wake_fd_ = -1;  // eventfd: written once by stop()
};

}  // namespace batchd::grpcfront

// Worker processes in tests: the daemon's config for them, and a worker process killed (if still
// running) and reaped at the end of the test.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "tests/helpers.hpp"

namespace batchd::test {

// A daemon config for worker processes: 4 places of 2 lanes, batches of a 2 ms wait, and a hang
// timeout of 400 ms (stretched by the build's slowdown).
inline DaemonConfig workers_config(const std::string& socket) {
  DaemonConfig config;
  config.socket_path = socket;
  config.backend = "workers";
  config.workers.max_workers = 4;
  config.workers.lanes_per_worker = 2;
  config.batch.max_wait = std::chrono::milliseconds(2);
  config.routing.device_timeout = grace(std::chrono::milliseconds(400));
  return config;
}

// A worker process, killed (if still running) and reaped at the end of the test.
class WorkerProcess {
 public:
  explicit WorkerProcess(std::vector<std::string> argv) : pid_(test::spawn(std::move(argv))) {}
  ~WorkerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Its waitpid status once it exits within timeout; nothing if it did not.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    int status = 0;
    if (!test::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) return std::nullopt;
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

}  // namespace batchd::test

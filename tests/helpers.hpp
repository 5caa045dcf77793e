// Shared by the tests: temporary socket paths, a daemon run as a child process or in-process,
// random UTF-8 inputs, and the size multiplier sanitizer builds use.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "backend/backend.hpp"
#include "daemon/config.hpp"
#include "daemon/daemon.hpp"

namespace batchd::test {

// BATCHD_TEST_SCALE (default 1): sanitizer builds shrink request counts with it.
double scale();
std::uint64_t scaled(std::uint64_t count, std::uint64_t minimum = 1);

// BATCHD_TEST_SLOWDOWN (default 1; meson sets 3 for ASan, 10 for TSan): how much slower this
// build runs. grace(d) is the allowance d, given for the plain build, stretched by it: a bound
// such as "within the deadline + grace(250ms)" holds on a sanitizer build without being loose on
// the plain one.
double slowdown();
std::chrono::milliseconds grace(std::chrono::milliseconds allowance);

// A fresh directory under /tmp for this test process, removed at exit; returns a socket path in it.
std::string temp_socket_path(const std::string& name = "batchd.sock");

// Random valid UTF-8 of exactly `bytes` bytes, mixing 1- to 4-byte code points.
std::string random_utf8(std::mt19937_64& rng, std::size_t bytes);

// The batchd binary built next to the tests (BATCHD_BIN, set by meson).
std::string daemon_binary();

// Starts argv[0] (a path) with argv and this process's environment; throws if it cannot.
pid_t spawn(std::vector<std::string> argv);

// Runs argv to its end and returns its waitpid status; kills it (and fails) after timeout.
int run_to_exit(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// A waitpid status in words: "exit code N" or "killed by signal N (name)".
std::string describe_exit(int status);

// Runs the batchd binary as a child process; stops it with SIGTERM on destruction. A sanitizer
// report at the daemon's exit shows only in its exit status, so every SIGTERM stop fails the test
// unless batchd exits with code 0.
class DaemonProcess {
 public:
  // Starts batchd with --socket path and extra args, and waits until it accepts connections.
  DaemonProcess(const std::string& socket_path, const std::vector<std::string>& args);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // Sends SIGTERM and returns the exit status (as from waitpid); fails the test unless it is 0.
  int stop();
  // Sends SIGKILL (a crash: no clean-up, no answers for what it holds) and waits for the exit;
  // fails the test if batchd had already died of something else.
  void kill9();

 private:
  pid_t pid_ = -1;
};

// A Daemon in this process on its own thread, for tests that need to inject a backend or watch
// its threads under TSan.
class InProcessDaemon {
 public:
  // backend nullptr: the one the config names.
  InProcessDaemon(DaemonConfig config, std::unique_ptr<Backend> backend);
  ~InProcessDaemon();
  InProcessDaemon(const InProcessDaemon&) = delete;
  InProcessDaemon& operator=(const InProcessDaemon&) = delete;

  [[nodiscard]] const std::string& socket_path() const noexcept { return daemon_.socket_path(); }
  [[nodiscard]] const DaemonStats& stats() const noexcept { return daemon_.stats(); }
  [[nodiscard]] const auto& devices() const noexcept { return daemon_.devices(); }
  // What a SIGHUP reload hands the daemon.
  void update_limits(const BatchLimits& limits) { daemon_.update_limits(limits); }
  void stop();

 private:
  Daemon daemon_;
  std::thread thread_;
};

// Connects a client to the daemon at path; fails the test (with the reason) if it cannot.
std::unique_ptr<Client> connect(const std::string& path);

// Waits for pred up to timeout, polling; returns its last value.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

}  // namespace batchd::test

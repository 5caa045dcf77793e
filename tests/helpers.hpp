// Shared by the tests: temporary socket paths, a daemon run as a child process or in-process,
// the project's tools run to their end with their output, raw attach handshakes, random UTF-8
// inputs, and the size multiplier sanitizer builds use.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "backend/backend.hpp"
#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/fd.hpp"
#include "tests/doctest_expected.hpp"

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
// Writes `text` to a file of that name in the tests' private directory; returns its path.
std::string write_temp_file(const std::string& name, const std::string& text);

// Random valid UTF-8 of exactly `bytes` bytes, mixing 1- to 4-byte code points.
std::string random_utf8(std::mt19937_64& rng, std::size_t bytes);

// The batchd binary built next to the tests (BATCHD_BIN, set by meson).
std::string daemon_binary();

// Another binary built next to the tests, from the variable meson sets for it (BATCHD_SEND_BIN,
// BATCHD_CTL_BIN, BATCHD_STRESS_BIN); throws if it is not set.
std::string built_binary(const char* env_var);

// Starts argv[0] (a path) with argv and this process's environment; throws if it cannot.
pid_t spawn(std::vector<std::string> argv);

// Runs argv to its end and returns its waitpid status; kills it (and fails) after timeout.
int run_to_exit(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

// A waitpid status in words: "exit code N" or "killed by signal N (name)".
std::string describe_exit(int status);

// Writes a byte at base + offset in a forked child and returns the child's waitpid status: exit
// code kWriteFaulted when the write faulted (its SIGSEGV or SIGBUS handler), 0 when it went through.
inline constexpr int kWriteFaulted = 42;
int write_in_child(void* base, std::size_t offset);
// Whether that status says the write did not go through: the handler's exit code, or the child
// killed by the fault (a sanitizer may keep its own handler: it then reports and aborts).
[[nodiscard]] bool faulted(int status);

// The user a child process runs as (the test runner must be root to switch).
struct RunAs {
  uid_t uid;
  gid_t gid;
};

// What a program run to its end left: its waitpid status and everything it wrote.
struct ProcessOutput {
  int status = 0;
  std::string out;  // standard output
  std::string err;  // standard error
  // WIFEXITED and its code, else -1.
  [[nodiscard]] int exit_code() const;
};

// Runs argv (a path first) to its end, as `as` if given, with this process's environment and
// stdin_text as its standard input; kills it (and throws) after timeout.
ProcessOutput run_captured(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                           std::optional<RunAs> as = std::nullopt, std::string_view stdin_text = {});

// Descriptors the process holds now.
std::size_t open_fds(pid_t pid);

// batchctl (BATCHD_CTL_BIN) with `args`, run as `as` if given (killed past `timeout`).
ProcessOutput batchctl(const std::vector<std::string>& args, std::optional<RunAs> as = std::nullopt,
                       std::chrono::milliseconds timeout = grace(std::chrono::seconds(60)));

// batchd-send (BATCHD_SEND_BIN) run as `as` against the daemon at socket, with `input`; first opens
// the tests' private socket directory (0711) so that the other user can reach the socket.
ProcessOutput send_as(const std::string& socket, RunAs as, const std::string& input);

// batchd-stress (BATCHD_STRESS_BIN) run with `args` plus --json --quiet: its exit status, its
// output, and the numbers of its JSON summary (the last line of its standard output).
struct StressRun {
  ProcessOutput process;
  // A numeric field of the summary: a top-level key, or a JSON pointer ("/by_class/high/sent");
  // fails the test if there is none.
  [[nodiscard]] double field(const std::string& key) const;
  // Whether the summary has that field (a number or not).
  [[nodiscard]] bool has(const std::string& key) const;
};
StressRun run_stress(const std::vector<std::string>& args,
                     std::chrono::milliseconds timeout = std::chrono::minutes(5));

// Runs the batchd binary as a child process; stops it with SIGTERM on destruction. A sanitizer
// report at the daemon's exit shows only in its exit status, so every stop by signal fails the
// test unless batchd exits with code 0.
class DaemonProcess {
 public:
  // Starts batchd with --socket path and extra args, and waits until it accepts connections.
  DaemonProcess(const std::string& socket_path, const std::vector<std::string>& args);
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // Sends `sig` and returns at once (SIGTERM and SIGINT both make batchd finish what it holds
  // and exit).
  void signal(int sig);
  // Waits for batchd to exit after signal() and returns its exit status (as from waitpid);
  // fails the test unless it is 0.
  int wait_exit();
  // signal(sig), then wait_exit().
  int stop(int sig = SIGTERM);
  // Sends SIGKILL (a crash: no clean-up, no answers for what it holds) and waits for the exit;
  // fails the test if batchd had already died of something else.
  void kill9();

 private:
  pid_t pid_ = -1;
  int signal_sent_ = 0;  // the last signal() sent, for the failure message
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
  // Daemon::run() has returned (a stop, or every device lost).
  [[nodiscard]] bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
  [[nodiscard]] bool all_devices_lost() const noexcept { return daemon_.all_devices_lost(); }
  void stop();

 private:
  Daemon daemon_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Connects a client to the daemon at path; fails the test (with the reason) if it cannot.
std::unique_ptr<Client> connect(const std::string& path);

// Requests taken by class (index: Priority), as the daemon publishes them.
using ClassCounts = std::array<std::uint64_t, kPriorityClasses>;
// The daemon's requests_taken_by_class as `client` reads it, once it equals `expected` or as it
// stands when `timeout` ends (the daemon republishes its status page every few tens of ms).
ClassCounts taken_by_class(const Client& client, const ClassCounts& expected,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Connects to the control socket without saying anything; fails the test if it cannot.
shm::UniqueFd raw_connect(const std::string& socket);

// Sends a hello (with fds, if any) on a raw connection and returns the daemon's reply status;
// its message, if wanted, in *message.
shm::AttachStatus hello_status(int conn, std::uint32_t flags = 0, std::span<const int> fds = {},
                               std::string* message = nullptr);

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

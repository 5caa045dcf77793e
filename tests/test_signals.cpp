// SIGTERM and SIGINT to the batchd binary while it holds requests: it closes its listener at once,
// refuses an attach that comes while it drains, answers every request it holds, and exits 0.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "backend/sim_reference.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr int kRequests = 16;
constexpr unsigned kSimRepeat = 2;

// Requests held in a batch window longer than the test; once the stop flushes them, their batch
// runs on the sim backend long enough (scaled with the build's slowdown) that the attaches below
// are tried while the requests are still in flight.
std::vector<std::string> daemon_args() {
  const auto batch = std::chrono::duration_cast<std::chrono::microseconds>(test::grace(500ms));
  return {"--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", std::to_string(batch.count()),
          "--sim-repeat", std::to_string(kSimRepeat), "--device-timeout-ms", "600000",
          "--max-wait-ms", "60000", "--max-batch", "1000", "--attach-timeout-ms", "600000"};
}

// Async requests through one client, each answer kept with whether it was right.
class HeldRequests {
 public:
  explicit HeldRequests(Client& client) : client_(client) {
    for (int i = 0; i < kRequests; ++i) {
      const std::string input = "held-" + std::to_string(i) + "-ünï";
      REQUIRE_FALSE(client_.submit_async(input, 600s, [this, input](Result&& r) {
        std::lock_guard lock(mu_);
        ++answered_;
        if (!r.ok()) {
          errors_.push_back(r.error().message);
        } else if (r.output() == sim_expected_output(input, kSimRepeat)) {
          ++correct_;
        }
      }).has_value());
    }
  }

  int answered() {
    client_.poll();
    std::lock_guard lock(mu_);
    return answered_;
  }

  void check_all_answered_correctly() {
    CHECK(test::eventually([&] { return answered() == kRequests; }, 10s));
    std::lock_guard lock(mu_);
    INFO("first error: ", errors_.empty() ? std::string("none") : errors_.front());
    CHECK(errors_.empty());
    CHECK(correct_ == kRequests);
  }

 private:
  Client& client_;
  std::mutex mu_;
  int answered_ = 0;  // guarded by mu_
  int correct_ = 0;   // guarded by mu_
  std::vector<std::string> errors_;  // guarded by mu_
};

// Whether the child has not exited yet; leaves an exit status for DaemonProcess to collect.
bool running(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

void stop_with_requests_in_flight(int sig) {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, daemon_args());
  auto client = test::connect(socket);
  HeldRequests held(*client);
  CHECK(test::eventually([&] { return client->daemon_status().requests_taken == kRequests; }, 10s));
  REQUIRE(held.answered() == 0);  // they wait in the batch window
  // A connection the daemon accepted before the signal, whose hello comes only after it.
  const std::size_t fds_before = test::open_fds(daemon.pid());
  shm::UniqueFd early = test::raw_connect(socket);
  CHECK(test::eventually([&] { return test::open_fds(daemon.pid()) > fds_before; }, 10s));

  daemon.signal(sig);
  // The listener goes away at once...
  CHECK(test::eventually([&] { return !std::filesystem::exists(socket); }, 10s));
  // ...so a new client finds no daemon,
  ClientOptions options;
  options.socket_path = socket;
  options.connect_timeout = 200ms;
  Error error;
  CHECK_FALSE(Client::connect(options, &error));
  CHECK(error.code == ErrorCode::kDaemonUnavailable);
  CHECK(error.message.find(socket) != std::string::npos);
  // and one that connected before the signal is told that the daemon is shutting down.
  std::string message;
  CHECK(test::hello_status(early.get(), 0, {}, &message) == shm::AttachStatus::kShuttingDown);
  CHECK(message.find("shutting down") != std::string::npos);
  // Both refusals came while the daemon was still draining the requests it holds.
  CHECK(held.answered() == 0);
  CHECK(running(daemon.pid()));

  CHECK(daemon.wait_exit() == 0);
  held.check_all_answered_correctly();
}

}  // namespace

TEST_CASE("SIGTERM with requests in flight: new attaches are refused, every request is answered, exit 0") {
  stop_with_requests_in_flight(SIGTERM);
}

TEST_CASE("SIGINT with requests in flight: new attaches are refused, every request is answered, exit 0") {
  stop_with_requests_in_flight(SIGINT);
}

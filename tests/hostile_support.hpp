// What the hostile-client tests share: a normal client's load checked answer by answer, the
// daemon's open descriptors, a stop with a bound, attackers in child processes of another user,
// and a prober that attaches new clients while an attack runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <optional>

#include "backend/reference_batchstring.hpp"
#include "client_lib/client.hpp"
#include "shm/fd.hpp"
#include "tests/helpers.hpp"

namespace batchd::test {

// A normal client's load: threads submitting synchronous requests back to back, every answer
// checked against the reference.
class NormalLoad {
 public:
  explicit NormalLoad(const std::string& socket, unsigned threads = 2) : client_(test::connect(socket)) {
    for (unsigned t = 0; t < threads; ++t) {
      threads_.emplace_back([this, t] {
        for (std::uint64_t i = 0; !stop_.load(); ++i) {
          const std::string input = "normal-" + std::to_string(t) + "-" + std::to_string(i);
          Result r = client_->submit(input, std::chrono::seconds(10));
          if (!r.ok()) {
            std::lock_guard lock(mu_);
            if (errors_++ == 0) first_error_ = r.error().message;
          } else if (r.output() != reference_batchstring(input, 1)) {
            wrong_.fetch_add(1);
          } else {
            ok_.fetch_add(1);
          }
        }
      });
    }
  }
  ~NormalLoad() { stop(); }

  void stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  [[nodiscard]] std::uint64_t ok() const { return ok_.load(); }

  // Stops the load and checks it: answers came, none wrong, no error.
  void check_clean() {
    stop();
    std::lock_guard lock(mu_);
    MESSAGE("normal client: ", ok_.load(), " ok, ", errors_, " errors, ", wrong_.load(), " wrong");
    INFO("first error: ", first_error_);
    CHECK(ok_.load() > 0);
    CHECK(errors_ == 0);
    CHECK(wrong_.load() == 0);
  }

  // Whether the load makes progress now: `count` more answers within the timeout.
  bool progresses(std::uint64_t count = 50) const {
    const std::uint64_t from = ok_.load();
    return test::eventually([&] { return ok_.load() >= from + count; }, std::chrono::seconds(10));
  }

 private:
  std::unique_ptr<Client> client_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> ok_{0}, wrong_{0};
  std::mutex mu_;
  std::uint64_t errors_ = 0;  // guarded by mu_
  std::string first_error_;   // guarded by mu_
};

// Stops the daemon with SIGTERM, failing (and killing it) if it does not exit within `bound`.
void stop_within_bound(DaemonProcess& daemon, std::chrono::milliseconds bound = std::chrono::seconds(20));

// Child processes that each run `attack(index)` (system calls only: it runs in a fork of a
// threaded process) as `as` if given, until stop() or destruction kills them.
class ChildAttackers {
 public:
  ChildAttackers(unsigned count, std::optional<RunAs> as, const std::function<void(unsigned)>& attack);
  ChildAttackers(unsigned count, const std::function<std::optional<RunAs>(unsigned)>& as_of,
                 const std::function<void(unsigned)>& attack);
  ~ChildAttackers() { stop(); }
  ChildAttackers(const ChildAttackers&) = delete;
  ChildAttackers& operator=(const ChildAttackers&) = delete;
  void stop();

 private:
  std::vector<pid_t> pids_;
};

// A socket address for `path`, made before a fork so that the child allocates nothing.
struct UnixAddress {
  explicit UnixAddress(const std::string& path);
  // A connected SOCK_SEQPACKET socket, or -1. System calls only.
  [[nodiscard]] int connect() const noexcept;
  char storage[128] = {};  // a sockaddr_un
};

// A TCP socket on loopback whose close lingers: SO_LINGER for `linger_s`, its send buffer full,
// and its peer (held in `peer`) never reading. Its last close blocks for up to linger_s.
shm::UniqueFd lingering_tcp_socket(shm::UniqueFd& peer, int linger_s);
// Sets a socket to reset rather than linger at its close.
void stop_lingering(int fd);

// A program run in the background (as `as` if given), its output kept; started from the calling
// thread, so that no two threads fork at once (TSan's fork handling does not survive that).
class BackgroundRun {
 public:
  BackgroundRun(const std::vector<std::string>& argv, std::optional<RunAs> as = std::nullopt);
  ~BackgroundRun();
  BackgroundRun(const BackgroundRun&) = delete;
  BackgroundRun& operator=(const BackgroundRun&) = delete;
  // Waits for its exit (killing it past `timeout`); its status and output.
  ProcessOutput wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  shm::UniqueFd out_;
};

// Attaches a new client every `period` while running; counts those that attached within
// `bound` (each attach is timed from its start to its client being ready). With a
// `hello_delay`, each attach is made by hand and sends its hello that long after connecting: the
// daemon has accepted it by then and must come back to read it.
class NewClientProber {
 public:
  NewClientProber(std::string socket, std::chrono::milliseconds period, std::chrono::milliseconds bound,
                  std::chrono::milliseconds hello_delay = std::chrono::milliseconds(0));
  ~NewClientProber() { stop(); }
  void stop();
  [[nodiscard]] unsigned tried() const { return tried_.load(); }
  [[nodiscard]] unsigned in_time() const { return in_time_.load(); }
  [[nodiscard]] double slowest_ms() const { return slowest_us_.load() / 1e3; }
  // Why the last attach that failed did (empty: none failed).
  [[nodiscard]] std::string last_failure() const;

 private:
  // One attach, by hand, its hello sent `hello_delay` after the connect: empty if it attached.
  static std::string attach_slowly(const std::string& socket, std::chrono::milliseconds hello_delay,
                                   std::chrono::milliseconds timeout);

  std::atomic<bool> stop_{false};
  std::atomic<unsigned> tried_{0}, in_time_{0};
  std::atomic<std::int64_t> slowest_us_{0};
  mutable std::mutex failure_mutex_;
  std::string last_failure_;
  std::thread thread_;
};

// 64 inputs of 64 KiB, one a line, readable by any user, beside `socket`: what the floods send
// (random inputs that large take the sanitizer builds' stress tool a minute to make). Returns
// its path.
std::string large_inputs_file(const std::string& socket);

}  // namespace batchd::test

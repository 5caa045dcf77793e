// Failure tests with real processes: clients killed while submitting must cost the daemon
// nothing (no leaked segment, descriptor or mapping) and must not disturb a normal client.
#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "client_lib/client.hpp"
#include "daemon/sim_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"


using namespace batchd;
using namespace std::chrono_literals;

namespace {

std::size_t count_entries(const std::string& dir) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
    ::closedir(d);
  }
  return n;
}

std::size_t count_segment_mappings(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    n += line.find("memfd:batchd-") != std::string::npos ? 1 : 0;
  }
  return n;
}

pid_t spawn_victim(const std::string& socket, unsigned seed) {
  const char* stress = std::getenv("BATCHD_STRESS_BIN");
  REQUIRE(stress != nullptr);
  std::vector<std::string> args{stress, "--socket", socket, "--threads", "4", "--duration", "30",
                                "--quiet", "--input-bytes", "0:2048", "--seed", std::to_string(seed)};
  return test::spawn(std::move(args));
}

}  // namespace

TEST_CASE("clients killed at random moments while submitting leak nothing and disturb no one") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto normal = test::connect(socket);
  REQUIRE(normal->submit("warm up", 5s).ok());
  std::this_thread::sleep_for(100ms);
  const std::string fd_dir = "/proc/" + std::to_string(daemon.pid()) + "/fd";
  const std::size_t fds_before = count_entries(fd_dir);
  const std::size_t maps_before = count_segment_mappings(daemon.pid());
  REQUIRE(maps_before > 0);  // the normal client's segments: the count sees memfd mappings

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ok{0}, bad{0};
  std::thread steady([&] {
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      const std::string input = "steady " + std::to_string(i);
      Result r = normal->submit(input, 10s);
      (r.ok() && r.output() == reference_batchstring(input, 1) ? ok : bad).fetch_add(1);
    }
  });

  const unsigned victims = static_cast<unsigned>(test::scaled(200, 20));
  std::mt19937 rng(1234);
  std::vector<pid_t> alive;
  for (unsigned v = 0; v < victims; ++v) {
    alive.push_back(spawn_victim(socket, v));
    if (alive.size() < 8) continue;
    // Kill one at a random moment of its life: attaching, submitting, or waiting for answers.
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 60));
    const std::size_t pick = rng() % alive.size();
    ::kill(alive[pick], SIGKILL);
    ::waitpid(alive[pick], nullptr, 0);
    alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  for (pid_t pid : alive) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  CHECK(test::eventually([&] { return normal->daemon_status().clients == 1; }, 10s));
  std::this_thread::sleep_for(200ms);  // in-flight batches of the dead release their segments
  stop.store(true);
  steady.join();

  const std::size_t fds_after = count_entries(fd_dir);
  const std::size_t maps_after = count_segment_mappings(daemon.pid());
  MESSAGE(victims, " clients killed; normal client ok ", ok.load(), ", bad ", bad.load(),
          "; daemon fds ", fds_before, " -> ", fds_after, ", segment mappings ", maps_before, " -> ",
          maps_after);
  CHECK(bad.load() == 0);
  CHECK(ok.load() > 0);
  CHECK(fds_after == fds_before);
  CHECK(maps_after == maps_before);
  // Whatever the victims had in the daemon was answered into the void or dropped: nothing waits.
  CHECK(test::eventually([&] { return normal->daemon_status().in_flight == 0; }, 10s));
  MESSAGE("requests the victims got into the daemon: ", normal->daemon_status().requests_taken - ok.load());
}

TEST_CASE("3x overload: every request is answered or refused as overloaded, none lost or wrong") {
  // One simulated device: a batch of 32 takes 20 ms + 32 x 0.2 ms = 26.4 ms, about 1,200
  // requests/s. Offered: 3,600/s with a 300 ms deadline each. How much of the device's capacity
  // goes to answers, how many miss their deadline, how fast refusals come and how flat memory
  // stays are measurements: bench/service.py reports them as ratios.
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "20000",
                                      "--sim-per-item-us", "200", "--max-batch", "32",
                                      "--max-wait-ms", "5"});
  auto client = test::connect(socket);
  const double rate = 3600;
  const auto duration = std::chrono::milliseconds(static_cast<std::int64_t>(test::scaled(5'000, 2'000)));

  struct Counts { std::uint64_t ok = 0, wrong = 0, overloaded = 0, timeout = 0, other = 0; } c;
  std::mutex mu;
  std::atomic<std::uint64_t> outstanding{0};
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t sent = 0;
  while (std::chrono::steady_clock::now() - start < duration) {
    const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (; static_cast<double>(sent) < elapsed * rate; ++sent) {
      const std::string input = "overload " + std::to_string(sent);
      outstanding.fetch_add(1);
      auto refused = client->submit_async(input, 300ms, [&, input](Result&& r) {
        std::lock_guard lock(mu);
        if (r.ok()) {
          ++(r.output() == sim_expected_output(input, 1) ? c.ok : c.wrong);
        } else if (r.error().code == ErrorCode::kOverloaded) {
          ++c.overloaded;
        } else if (r.error().code == ErrorCode::kTimeout) {
          ++c.timeout;
        } else {
          ++c.other;
        }
        outstanding.fetch_sub(1);
      });
      if (refused) {
        outstanding.fetch_sub(1);
        std::lock_guard lock(mu);
        ++(refused->code == ErrorCode::kOverloaded ? c.overloaded : c.other);
      }
    }
    client->poll();
    std::this_thread::sleep_for(1ms);
  }
  REQUIRE(test::eventually([&] { client->poll(); return outstanding.load() == 0; }, 10s));
  MESSAGE("offered ", sent, ": ok ", c.ok, ", overloaded ", c.overloaded, ", timeouts ", c.timeout,
          ", wrong ", c.wrong, ", other ", c.other);
  CHECK(c.ok + c.wrong + c.overloaded + c.timeout + c.other == sent);
  CHECK(c.wrong == 0);
  CHECK(c.other == 0);
  CHECK(c.ok > 0);          // the device keeps serving
  CHECK(c.overloaded > 0);  // and what it cannot serve is refused, not queued without bound
  // Once the load stops, the daemon holds nothing: every refused request was let go.
  CHECK(test::eventually([&] { return client->daemon_status().in_flight == 0; }, 10s));
  CHECK(client->submit("after the storm", 5s).ok());
  CHECK(daemon.stop() == 0);
}

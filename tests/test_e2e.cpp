// End to end with separate processes: the batchd binary and client processes that check every
// answer, plus the error a caller sees for each way a request can fail.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "client_lib/client.hpp"
#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<Client> connect_to(const std::string& path, std::chrono::milliseconds timeout = 2s,
                                   Error* error = nullptr) {
  ClientOptions options;
  options.socket_path = path;
  options.connect_timeout = timeout;
  return Client::connect(options, error);
}

// Runs in a child process: threads × requests of random lengths; exit code 0 only if every
// answer was right. Writes its counts to a pipe for the parent.
int client_process(const std::string& path, int index, int threads, std::uint64_t per_thread,
                   int report_fd) {
  auto client = connect_to(path);
  if (!client) return 10;
  std::atomic<std::uint64_t> ok{0}, wrong{0}, failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(index * 1000 + t));
      for (std::uint64_t i = 0; i < per_thread; ++i) {
        std::string input = test::random_utf8(rng, rng() % 4097);
        // A unique prefix where it fits, so two requests in flight never share an answer.
        const std::string tag = std::to_string(index) + "." + std::to_string(t) + "." + std::to_string(i);
        if (input.size() >= tag.size()) input.replace(0, tag.size(), tag);
        if (input.size() > tag.size() && (static_cast<unsigned char>(input[tag.size()]) & 0xC0) == 0x80) {
          input = test::random_utf8(rng, input.size());  // the tag cut a code point: start over
        }
        Result r = client->submit(input, 30s);
        if (!r.ok()) {
          // The first failure of each process says what it was (a failed run must explain itself).
          if (failed.fetch_add(1) == 0) {
            std::fprintf(stderr, "client process %d: first failure: %s: %s\n", index,
                         std::string(error_code_name(r.error().code)).c_str(), r.error().message.c_str());
          }
        } else if (r.output() != reference_batchstring(input, 1)) {
          wrong.fetch_add(1);
        } else {
          ok.fetch_add(1);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  const std::uint64_t counts[3] = {ok.load(), wrong.load(), failed.load()};
  if (::write(report_fd, counts, sizeof(counts)) != sizeof(counts)) return 11;
  return wrong.load() == 0 && failed.load() == 0 ? 0 : 1;
}

}  // namespace

TEST_CASE("4 client processes x 8 threads: every answer verified, none wrong") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--max-wait-ms", "2", "--max-input-bytes", "8192"});
  const int processes = 4, threads = 8;
  const std::uint64_t per_thread = test::scaled(6250, 100);  // 200,000 requests at scale 1
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) ::_exit(client_process(path, p, threads, per_thread, pipe_fds[1]));
    children.push_back(pid);
  }
  ::close(pipe_fds[1]);
  std::uint64_t ok = 0, wrong = 0, failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  std::uint64_t counts[3];
  while (::read(pipe_fds[0], counts, sizeof(counts)) == sizeof(counts)) {
    ok += counts[0];
    wrong += counts[1];
    failed += counts[2];
  }
  ::close(pipe_fds[0]);
  MESSAGE("requests ok ", ok, ", wrong ", wrong, ", failed ", failed);
  CHECK(wrong == 0);
  CHECK(failed == 0);
  CHECK(ok == processes * threads * per_thread);
  CHECK(daemon.stop() == 0);  // a clean SIGTERM exit
}

TEST_CASE("each way a request fails reaches the caller as its own error") {
  const std::string path = test::temp_socket_path();
  // The fixed rule: a request that times out has to be held in a window first.
  test::DaemonProcess daemon(path, {"--policy", "fixed", "--max-wait-ms", "1000", "--max-input-bytes", "1024"});
  auto client = connect_to(path);
  REQUIRE(client);

  SUBCASE("an oversized input is too large") {
    Result r = client->submit(std::string(1025, 'a'), 2s);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kTooLarge);
    CHECK(r.error().message.find("1025") != std::string::npos);
    CHECK(client->submit(std::string(1024, 'a'), 5s).ok());  // the limit itself is fine
  }
  SUBCASE("a non-UTF-8 input is invalid") {
    for (const char* bad : {"\xff", "abc\xc3", "\xed\xa0\x80" /* surrogate */, "\xc0\xaf"}) {
      Result r = client->submit(bad, 2s);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == ErrorCode::kInvalidUtf8);
    }
  }
  SUBCASE("a deadline that passes is a timeout") {
    const auto start = std::chrono::steady_clock::now();
    Result r = client->submit("waits in a 1 s batch window", 100ms);
    const auto took = std::chrono::steady_clock::now() - start;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::kTimeout);
    CHECK(took >= 100ms);
    CHECK(took < 100ms + test::grace(800ms));  // well before the 1 s window closes
    // The slot comes back once the daemon answers the abandoned request.
    CHECK(client->submit("next", 5s).ok());
  }
}

TEST_CASE("a daemon that is not running is reported as unavailable within the timeout") {
  const std::string path = test::temp_socket_path("nobody-here.sock");
  Error error;
  const auto start = std::chrono::steady_clock::now();
  auto client = connect_to(path, 300ms, &error);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK_FALSE(client);
  CHECK(error.code == ErrorCode::kDaemonUnavailable);
  CHECK(error.message.find(path) != std::string::npos);
  CHECK(took < 300ms + test::grace(1200ms));
}

namespace {

long cpu_ticks(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return -1;
  char buf[1024] = {};
  const std::size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  // Fields 14 and 15 (utime, stime) follow the parenthesised command name.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || n == 0) return -1;
  long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) != 2) {
    return -1;
  }
  return utime + stime;
}

}  // namespace

TEST_CASE("an idle daemon with an attached client sleeps instead of spinning") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--max-wait-ms", "1"});
  auto client = connect_to(path);
  REQUIRE(client);
  REQUIRE(client->submit("wake it once", 5s).ok());
  std::this_thread::sleep_for(200ms);
  const long before = cpu_ticks(daemon.pid());
  std::this_thread::sleep_for(2s);
  const long after = cpu_ticks(daemon.pid());
  REQUIRE(before >= 0);
  REQUIRE(after >= before);
  MESSAGE("daemon CPU while idle for 2 s: ", (after - before) * 1000 / sysconf(_SC_CLK_TCK), " ms");
  // A drain loop that spins burns a whole core; one that sleeps, next to nothing (how little is
  // measured in bench/service.py). Half a core tells the two apart on any build.
  CHECK(after - before < sysconf(_SC_CLK_TCK));
}

TEST_CASE("a second daemon on the same socket is refused, and says which lock another daemon holds") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess first(path, {});
  const test::ProcessOutput second = test::run_captured({test::daemon_binary(), "--socket", path}, 30s);
  INFO("stdout: ", second.out, "\nstderr: ", second.err);
  CHECK(second.exit_code() == 1);
  CHECK(second.err.find("another batchd already serves this socket (lock " + path + ".lock is held)") !=
        std::string::npos);
  auto client = connect_to(path);
  REQUIRE(client);
  CHECK(client->submit("still the first", 5s).ok());
}

TEST_CASE("the example plug-in answers end to end") {
  const char* plugin = std::getenv("BATCHD_EXAMPLE_PLUGIN");
  REQUIRE(plugin != nullptr);
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--backend", std::string("plugin:") + plugin, "--plugin-config",
                                    "cost=2;devices=2", "--max-wait-ms", "0"});
  auto client = connect_to(path);
  REQUIRE(client);
  for (const std::string input : {"hello", "", "héllo wörld 🙂"}) {
    Result r = client->submit(input, 5s);
    REQUIRE(r.ok());
    CHECK(r.output() == reference_batchstring(input, 2));
  }
}

TEST_CASE("the sim backend's flags: varying-length answers and a poison input") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--backend", "sim", "--sim-devices", "3", "--sim-fixed-us", "100",
                                    "--sim-repeat", "3", "--sim-poison", "BAD", "--max-wait-ms", "0"});
  auto client = connect_to(path);
  REQUIRE(client);
  Result r = client->submit("abc€", 5s);
  REQUIRE(r.ok());
  CHECK(r.output() == "€cba€cba€cba");
  Result bad = client->submit("BAD input", 5s);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ErrorCode::kBackendError);
  CHECK(bad.error().message.find("poison") != std::string::npos);
  CHECK(client->submit("fine", 5s).ok());
}

TEST_CASE("--spare-batches 0: batches go only to free lanes and every caller still gets its answer") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "500",
                                    "--sim-per-item-us", "10", "--max-wait-ms", "0", "--spare-batches", "0"});
  auto client = connect_to(path);
  REQUIRE(client);
  std::atomic<int> right{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const std::string input = "spare " + std::to_string(t) + "/" + std::to_string(i);
        Result r = client->submit(input, 10s);
        if (r.ok() && r.output() == sim_expected_output(input, 1)) right.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK(right.load() == 800);
  // With two lanes and no spares, 8 callers' requests must have shared batches. The status page
  // is published periodically: wait until it has seen every answer.
  DaemonStatus status = client->daemon_status();
  for (int i = 0; i < 100 && status.requests_ok < 800; ++i) {
    std::this_thread::sleep_for(50ms);
    status = client->daemon_status();
  }
  REQUIRE(status.requests_ok >= 800);
  std::uint64_t batches = 0;
  for (const auto& d : status.devices) batches += d.batches_ok;
  CHECK(batches > 0);
  CHECK(batches < 800);
}

TEST_CASE("a plug-in that returns the wrong count or fails its call gives clear errors, no crash") {
  const char* dir = std::getenv("BATCHD_TEST_PLUGIN_DIR");
  REQUIRE(dir != nullptr);
  SUBCASE("the wrong number of results") {
    const std::string path = test::temp_socket_path();
    test::DaemonProcess daemon(path, {"--backend", std::string("plugin:") + dir + "/wrong_count.so",
                                      "--max-wait-ms", "0"});
    auto client = connect_to(path);
    REQUIRE(client);
    for (int i = 0; i < 3; ++i) {
      Result r = client->submit("anything " + std::to_string(i), 5s);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == ErrorCode::kBackendError);
      CHECK(r.error().message.find("results for") != std::string::npos);
    }
    CHECK(daemon.stop() == 0);  // still alive, and stops cleanly
  }
  SUBCASE("a call that fails with an error") {
    const std::string path = test::temp_socket_path();
    test::DaemonProcess daemon(path, {"--backend", std::string("plugin:") + dir + "/failing.so",
                                      "--max-wait-ms", "0"});
    auto client = connect_to(path);
    REQUIRE(client);
    Result bad = client->submit("fail", 5s);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == ErrorCode::kBackendError);
    CHECK(bad.error().message.find("refusing this batch") != std::string::npos);
    Result good = client->submit("fine", 5s);
    CHECK(good.ok());
    CHECK(daemon.stop() == 0);
  }
}

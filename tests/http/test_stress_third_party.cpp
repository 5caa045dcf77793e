// batchd-stress --http against a server that is not batchd-http: Python's standard library
// (tests/http/chunked_server.py) answering chunked, as uvicorn-based servers do, or with bodies
// ended by the close. Every answer is checked in the closed and the pipelined open loop, and
// wrong ones are counted wrong and fail the run.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr int kExitFailures = 1;  // batchd-stress: some answers were errors or wrong

// chunked_server.py run by the python3 meson found; killed on destruction.
class ThirdPartyServer {
 public:
  explicit ThirdPartyServer(const std::string& mode) {
    const char* python = std::getenv("BATCHD_PYTHON");
    const char* script = std::getenv("BATCHD_CHUNKED_SERVER");
    REQUIRE(python != nullptr);
    REQUIRE(script != nullptr);
    const std::string port_file = test::temp_socket_path("chunked.port");
    pid_ = test::spawn({python, script, port_file, "--mode", mode});
    const bool listening = test::eventually(
        [&] {
          std::ifstream in(port_file);
          return static_cast<bool>(in >> port_);
        },
        10s);
    if (!listening) {
      stop();
      FAIL("chunked_server.py did not start listening");
    }
  }
  ~ThirdPartyServer() { stop(); }
  ThirdPartyServer(const ThirdPartyServer&) = delete;
  ThirdPartyServer& operator=(const ThirdPartyServer&) = delete;

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  unsigned port_ = 0;
};

// Closed loop: two threads, one connection each.
std::vector<std::string> closed_loop(const std::string& url, std::uint64_t requests) {
  return {"--http", url, "--threads", "2", "--requests", std::to_string(requests)};
}

// Open loop: four connections of up to 8 pipelined requests, over two epoll threads.
std::vector<std::string> open_loop(const std::string& url, std::uint64_t requests) {
  return {"--http", url, "--rate", "400", "--connections", "4", "--pipeline-depth", "8",
          "--io-threads", "2", "--requests", std::to_string(requests)};
}

void check_all_right(const test::StressRun& run, std::uint64_t requests) {
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("wrong") == 0);
  CHECK(run.field("errors") == 0);
}

}  // namespace

TEST_CASE("a third-party server that answers chunked: every answer checked, closed and open loop") {
  const ThirdPartyServer server("right");
  const std::uint64_t requests = test::scaled(300, 50);
  check_all_right(test::run_stress(closed_loop(server.url(), requests)), requests);
  check_all_right(test::run_stress(open_loop(server.url(), requests)), requests);
}

TEST_CASE("wrong answers from a chunked server are counted wrong and fail the run") {
  const ThirdPartyServer server("wrong");
  const std::uint64_t requests = test::scaled(100, 50);
  for (const auto& args : {closed_loop(server.url(), requests), open_loop(server.url(), requests)}) {
    const test::StressRun run = test::run_stress(args);
    INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
    CHECK(run.process.exit_code() == kExitFailures);
    CHECK(run.field("wrong") == static_cast<double>(requests));
    CHECK(run.field("ok") == 0);
    CHECK(run.field("errors") == 0);
  }
}

TEST_CASE("a server whose bodies end where the connection does (no length, no chunks)") {
  const ThirdPartyServer server("eof");
  const std::uint64_t requests = test::scaled(100, 20);
  check_all_right(test::run_stress(closed_loop(server.url(), requests)), requests);
  check_all_right(test::run_stress(open_loop(server.url(), requests)), requests);
}

// batchd-stress over HTTP (--http) against batchd-http: a clean run exits 0 with every request
// answered right, and answers of another SHA-256 cost are all counted wrong, with a failing exit;
// the pipelined open loop, and its measured window; priority classes sent as X-Priority. (Servers other than batchd-http:
// test_stress_third_party.cpp.)
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr int kExitFailures = 1;  // batchd-stress: some answers were errors or wrong

std::vector<std::string> http_args(std::uint16_t port, std::uint64_t requests, const char* cost) {
  return {"--http", "http://127.0.0.1:" + std::to_string(port), "--threads", "2", "--requests",
          std::to_string(requests), "--cost", cost, "--timeout-ms", "20000"};
}

}  // namespace

TEST_CASE("--http: closed loop through batchd-http, every answer checked, exit 0") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun run = test::run_stress(http_args(frontend.port(), requests, "1"));
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("sent") == static_cast<double>(requests));
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

TEST_CASE("--http: answers of another cost are all counted wrong, and the exit status says so") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", "2", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(200, 50);
  const test::StressRun wrong = test::run_stress(http_args(frontend.port(), requests, "1"));
  INFO("stdout: ", wrong.process.out, "\nstderr: ", wrong.process.err);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("sent") == static_cast<double>(requests));
  CHECK(wrong.field("wrong") == static_cast<double>(requests));
  CHECK(wrong.field("ok") == 0);
  CHECK(wrong.field("errors") == 0);
  // The same daemon's answers checked at its own cost are all right.
  const test::StressRun right = test::run_stress(http_args(frontend.port(), requests, "2"));
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("ok") == static_cast<double>(requests));
  CHECK(right.field("wrong") == 0);
}

TEST_CASE("--http open loop: pipelined over several connections and epoll threads, every answer checked") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun run = test::run_stress(
      {"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--rate", "400",
       "--connections", "4", "--pipeline-depth", "8", "--io-threads", "2", "--requests",
       std::to_string(requests), "--timeout-ms", "20000"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

TEST_CASE("--http with --warmup and --cooldown: only the window's requests are counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const test::StressRun run = test::run_stress(
      {"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--rate", "400",
       "--duration", "0.5", "--warmup", "0.2", "--cooldown", "0.2", "--timeout-ms", "20000"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  // Exactly the requests whose intended send time falls in the 0.5 s window: 200 at 400/s. Both
  // follow from the schedule (intended send times), not from how fast this machine is.
  CHECK(run.field("sent") == doctest::Approx(200).epsilon(0.01));
  CHECK(run.field("ok") == run.field("sent"));
  CHECK(run.field("duration_s") == doctest::Approx(0.5));
}

TEST_CASE("--http with --priority-mix: X-Priority carries each request's class to the daemon") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  auto watcher = test::connect(socket);
  const std::uint64_t requests = test::scaled(400, 100);
  for (const bool open_loop : {false, true}) {
    CAPTURE(open_loop);
    const test::ClassCounts before = watcher->daemon_status().requests_taken_by_class;
    std::vector<std::string> args{"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--requests",
                                  std::to_string(requests), "--timeout-ms", "20000", "--priority-mix",
                                  "high:25,normal:25,low:50"};
    if (open_loop) {
      args.insert(args.end(), {"--rate", "1000", "--connections", "2", "--pipeline-depth", "4"});
    } else {
      args.insert(args.end(), {"--threads", "2"});
    }
    const test::StressRun run = test::run_stress(args);
    INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
    REQUIRE(run.process.exit_code() == 0);
    test::ClassCounts expected = before;
    std::uint64_t total = 0;
    for (const Priority p : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
      const std::string at = "/by_class/" + std::string(priority_name(p));
      const auto sent = static_cast<std::uint64_t>(run.field(at + "/sent"));
      CHECK(sent > 0);
      CHECK(run.field(at + "/ok") == static_cast<double>(sent));
      expected[static_cast<std::size_t>(p)] += sent;
      total += sent;
    }
    CHECK(total == requests);
    CHECK(test::taken_by_class(*watcher, expected) == expected);
  }
}

// batchd-stress as the benchmarks use it: answers checked against the sim backend or SHA-256 of
// the daemon's cost, wrong ones counted and reflected in the exit status, and an open loop whose
// measured window excludes warm-up and cool-down load. (Over HTTP: tests/http.)
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/helpers.hpp"

namespace test = batchd::test;

namespace {

constexpr int kExitFailures = 1;  // batchd-stress: some answers were errors or wrong

}  // namespace

TEST_CASE("--expect-sim checks the sim backend's answers, and catches wrong ones") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--sim-repeat", "2", "--max-wait-ms", "1"});
  const std::vector<std::string> common{"--socket", socket, "--threads", "2", "--requests", "400"};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--expect-sim", "2"});
  const test::StressRun right = test::run_stress(args);
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("ok") == 400);
  CHECK(right.field("wrong") == 0);
  // The daemon repeats twice; expecting once must count every answer wrong, and say so in the
  // exit status that scripts and CI read.
  args = common;
  args.insert(args.end(), {"--expect-sim", "1"});
  const test::StressRun wrong = test::run_stress(args);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("wrong") == 400);
  CHECK(wrong.field("ok") == 0);
}

TEST_CASE("SHA-256 answers of another cost are all counted wrong, and the exit status says so") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", "2", "--max-wait-ms", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const std::vector<std::string> common{"--socket", socket, "--threads", "2", "--requests",
                                        std::to_string(requests)};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--cost", "2"});
  const test::StressRun right = test::run_stress(args);
  INFO("stderr: ", right.process.err);
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("sent") == static_cast<double>(requests));
  CHECK(right.field("ok") == static_cast<double>(requests));
  CHECK(right.field("errors") == 0);
  CHECK(right.field("wrong") == 0);

  args = common;
  args.insert(args.end(), {"--cost", "1"});
  const test::StressRun wrong = test::run_stress(args);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("sent") == static_cast<double>(requests));
  CHECK(wrong.field("wrong") == static_cast<double>(requests));
  CHECK(wrong.field("ok") == 0);
  CHECK(wrong.field("errors") == 0);
}

TEST_CASE("--warmup and --cooldown load runs around the window but only the window is counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--max-wait-ms", "1"});
  const test::StressRun out = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate", "1000",
                                                "--duration", "0.5", "--warmup", "0.3", "--cooldown",
                                                "0.2", "--timeout-ms", "5000"});
  REQUIRE(out.process.exit_code() == 0);
  // Exactly the requests whose intended send time falls in the 0.5 s window: 500 at 1,000/s.
  // Both follow from the schedule (intended send times), not from how fast this machine is.
  CHECK(out.field("sent") == doctest::Approx(500).epsilon(0.01));
  CHECK(out.field("ok") == out.field("sent"));
  CHECK(out.field("duration_s") == doctest::Approx(0.5));
  CHECK(out.field("rps") == doctest::Approx(out.field("sent") / out.field("duration_s")));
}

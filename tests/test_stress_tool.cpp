// batchd-stress as the benchmarks use it: answers checked against the sim backend, and an open
// loop whose measured window excludes warm-up and cool-down load.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "tests/helpers.hpp"

namespace test = batchd::test;

namespace {

struct StressRun {
  std::string out;  // stdout: the summary, with --json its last line
  int status = -1;  // as from waitpid
};

// Runs batchd-stress with `args`.
StressRun run_stress(const std::string& args) {
  const char* stress = std::getenv("BATCHD_STRESS_BIN");
  REQUIRE(stress != nullptr);
  const std::string command = std::string(stress) + " " + args + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  StressRun run;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) run.out.append(buffer, n);
  run.status = ::pclose(pipe);
  return run;
}

// The exit code of a run that exited normally; -1 for one killed by a signal.
int exit_code(const StressRun& run) { return WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1; }

// A numeric field of the --json summary.
double field(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":([0-9.]+)");
  REQUIRE_MESSAGE(std::regex_search(json, m, re), "no " << key << " in: " << json);
  return std::stod(m[1].str());
}

}  // namespace

TEST_CASE("--expect-sim checks the sim backend's answers, and catches wrong ones") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--sim-repeat", "2", "--max-wait-ms", "1"});
  const std::string common = "--socket " + socket + " --json --quiet --threads 2 --requests 400 ";
  const StressRun right = run_stress(common + "--expect-sim 2");
  CHECK(field(right.out, "ok") == 400);
  CHECK(field(right.out, "wrong") == 0);
  CHECK(exit_code(right) == 0);
  // The daemon repeats twice; expecting once must count every answer wrong, and say so in the
  // exit status that scripts and CI read.
  const StressRun wrong = run_stress(common + "--expect-sim 1");
  CHECK(field(wrong.out, "wrong") == 400);
  CHECK(field(wrong.out, "ok") == 0);
  CHECK(exit_code(wrong) != 0);
  CHECK(exit_code(wrong) != -1);
}

TEST_CASE("--warmup and --cooldown load runs around the window but only the window is counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--max-wait-ms", "1"});
  const StressRun run = run_stress("--socket " + socket + " --json --quiet --expect-sim 1 --rate 1000 "
                                     "--duration 0.5 --warmup 0.3 --cooldown 0.2 --timeout-ms 5000");
  REQUIRE(exit_code(run) == 0);
  // Exactly the requests whose intended send time falls in the 0.5 s window: 500 at 1,000/s.
  // Both follow from the schedule (intended send times), not from how fast this machine is.
  CHECK(field(run.out, "sent") == doctest::Approx(500).epsilon(0.01));
  CHECK(field(run.out, "ok") == field(run.out, "sent"));
  CHECK(field(run.out, "duration_s") == doctest::Approx(0.5));
  CHECK(field(run.out, "rps") == doctest::Approx(field(run.out, "sent") / field(run.out, "duration_s")));
}

// batchd-stress as the benchmarks use it: answers checked against the sim backend, and an open
// loop whose measured window excludes warm-up and cool-down load.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "tests/helpers.hpp"

namespace test = batchd::test;

namespace {

// Runs batchd-stress with `args` and returns its stdout.
std::string run_stress(const std::string& args) {
  const char* stress = std::getenv("BATCHD_STRESS_BIN");
  REQUIRE(stress != nullptr);
  const std::string command = std::string(stress) + " " + args + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

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
  const std::string right = run_stress(common + "--expect-sim 2");
  CHECK(field(right, "ok") == 400);
  CHECK(field(right, "wrong") == 0);
  // The daemon repeats twice; expecting once must count every answer wrong.
  const std::string wrong = run_stress(common + "--expect-sim 1");
  CHECK(field(wrong, "wrong") == 400);
  CHECK(field(wrong, "ok") == 0);
}

TEST_CASE("--warmup and --cooldown load runs around the window but only the window is counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--max-wait-ms", "1"});
  const std::string out = run_stress("--socket " + socket + " --json --quiet --expect-sim 1 --rate 1000 "
                                     "--duration 0.5 --warmup 0.3 --cooldown 0.2 --timeout-ms 5000");
  // Exactly the requests whose intended send time falls in the 0.5 s window: 500 at 1,000/s.
  CHECK(field(out, "sent") == doctest::Approx(500).epsilon(0.01));
  CHECK(field(out, "ok") == field(out, "sent"));
  CHECK(field(out, "duration_s") == doctest::Approx(0.5));
  CHECK(field(out, "rps") == doctest::Approx(1000).epsilon(0.02));
}

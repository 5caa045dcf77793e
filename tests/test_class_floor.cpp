// No class takes everything (pending_queue.hpp, admission's floor in daemon_batching.cpp): a
// client holding the high grant (the daemon's own user) keeps every slot of its ring in flight
// with 64 KiB inputs, and a light normal client beside it is still answered, in time, every
// time; with strict priority (floors 0) the same flood holds it back behind itself. A reload that
// raises the floor from 0 applies it at once.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "tests/helpers.hpp"
#include "tests/hostile_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// SHA-256 rounds per input: 64 KiB inputs at this cost run at well under the flood's rate on two
// cores, so the flood keeps its ring full even when other work shares the machine (as a CI run's
// sanitizer compiles do); at cost 1 a slowed flood may not, and strict priority then shows nothing.
constexpr const char* kCost = "3";

struct Light {
  double ok = 0, errors = 0, timeouts = 0, overloaded = 0, p99_us = 0;
};

// The light client, 200 requests/s with the default 5 s deadline, while a flood at high runs.
// `must_succeed`: its run has no error (with a floor); under strict priority errors are what may
// show, and batchd-stress then exits 1.
Light light_beside_high_flood(const std::string& socket, bool must_succeed) {
  const std::vector<std::string> flood{test::built_binary("BATCHD_STRESS_BIN"), "--socket", socket, "--rate",
                                       "20000", "--input-file", test::large_inputs_file(socket), "--duration",
                                       std::to_string(4 * test::scale() + 3), "--timeout-ms", "5000",
                                       "--priority", "high", "--cost", kCost, "--quiet"};
  test::BackgroundRun flooder(flood);
  std::this_thread::sleep_for(1s);  // its ring fills
  const test::StressRun run = test::run_stress(
      {"--socket", socket, "--rate", "200", "--duration", std::to_string(2 * test::scale() + 1), "--cost", kCost});
  INFO("light client: ", run.process.err);
  CHECK((run.process.exit_code() == 0 || !must_succeed));
  const test::ProcessOutput ended = flooder.wait(test::grace(60s));
  INFO("flood: ", ended.err);
  return {run.field("ok"), run.field("errors"), run.field("/errors_by_kind/timeout"),
          run.field("/errors_by_kind/overloaded"), run.field("p99_us")};
}

}  // namespace

TEST_CASE("a granted high flood with every slot in flight slows a light normal client, never fails it") {
  Light with_floor;
  {
    const std::string socket = test::temp_socket_path();
    test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", kCost});
    with_floor = light_beside_high_flood(socket, true);
    auto observer = test::connect(socket);
    const DaemonStatus status = observer->daemon_status();
    // The flood really ran at high: the test's user is the daemon's, which holds the grant.
    CHECK(status.requests_taken_by_class[static_cast<std::size_t>(Priority::kHigh)] > 0);
    CHECK(status.priority_downgrades == 0);
  }
  MESSAGE("light normal client beside a high flood of 64 KiB inputs: ", with_floor.ok, " ok, ", with_floor.errors,
          " errors (", with_floor.timeouts, " timeouts, ", with_floor.overloaded, " overloaded), p99 ",
          with_floor.p99_us / 1000, " ms");
  CHECK(with_floor.ok > 0);
  CHECK(with_floor.errors == 0);
  CHECK(with_floor.timeouts == 0);
  CHECK(with_floor.p99_us < 100'000 * test::slowdown());
  // The floor is what holds: without it the light client waits behind the flood (or times out).
  // Only a flood that keeps high requests waiting shows it, and on a shared machine the flooding
  // process itself may be starved for a run (CI's debug suite once saw a strict p99 of 21 ms,
  // 173 ms here alone): a starved flood says nothing either way, so up to three runs are given.
  bool strict_hurts = false;
  for (int attempt = 1; attempt <= 3 && !strict_hurts; ++attempt) {
    const std::string socket = test::temp_socket_path();
    test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", kCost, "--normal-floor-percent", "0"});
    const Light strict = light_beside_high_flood(socket, false);
    MESSAGE("with strict priority (floor 0), run ", attempt, ": ", strict.ok, " ok, ", strict.errors, " errors, p99 ",
            strict.p99_us / 1000, " ms");
    strict_hurts = strict.errors > 0 || strict.p99_us > 2 * with_floor.p99_us;
  }
  CHECK(strict_hurts);
}

TEST_CASE("a reload that raises the floor from 0 takes effect at once: the light client is served") {
  const std::string config = test::write_temp_file("floor.toml", "normal_floor_percent = 0\nmax_wait_ms = 50\n");
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--config", config, "--backend", "cpu", "--cost", kCost});
  auto observer = test::connect(socket);
  // The floor is not on the status page; the window beside it in the same file is, and the
  // drain loop applies a reload whole.
  std::ofstream(config) << "normal_floor_percent = 10\nmax_wait_ms = 49\n";
  daemon.signal(SIGHUP);
  REQUIRE(test::eventually([&] { return observer->daemon_status().max_wait_ns == 49'000'000; }, test::grace(5s)));
  const Light after = light_beside_high_flood(socket, true);
  MESSAGE("light normal client beside a high flood after a reload to a 10 % floor: ", after.ok, " ok, ", after.errors,
          " errors, p99 ", after.p99_us / 1000, " ms");
  CHECK(after.ok > 0);
  CHECK(after.errors == 0);
  CHECK(after.timeouts == 0);
  CHECK(after.p99_us < 100'000 * test::slowdown());
}

// A slow worker costs only itself (router_pick.cpp): beside a good worker, one a hundred times
// slower gets only probes and what it would finish first, so callers see the good worker's
// latency and none times out; once it is fast again it takes its share back within seconds. A
// worker that hangs costs only the batches it holds (router_view.cpp: a stalled lane is not
// counted on), and one that starts cold is not judged on its cold batches (laggard_verdict.hpp).
// Both workers are tests/worker_misbehave sleeping per batch (a GPU's batch time, no CPU), so
// the two cores are left to the daemon and the load.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "client_lib/client.hpp"
#include "daemon/router.hpp"
#include "tests/helpers.hpp"
#include "tests/hostile_support.hpp"
#include "tests/worker_process.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> sleeper(const std::string& socket, const std::string& mode, const std::string& ms,
                                 const std::string& flag = "") {
  std::vector<std::string> argv{test::built_binary("BATCHD_MISBEHAVE_BIN"), socket, mode, ms};
  if (!flag.empty()) argv.push_back(flag);
  return argv;
}

// The place the named worker holds.
std::size_t place_of(const Client& client, const std::string& name) {
  std::size_t place = 0;
  REQUIRE(test::eventually([&] {
    const DaemonStatus status = client.daemon_status();
    for (place = 0; place < status.devices.size(); ++place) {
      if (status.devices[place].worker_name == name) return true;
    }
    return false;
  }, test::grace(10s)));
  return place;
}

std::vector<std::string> paced(const std::string& socket, unsigned rate, double seconds) {
  return {"--socket", socket, "--rate", std::to_string(rate), "--duration", std::to_string(seconds),
          "--timeout-ms", std::to_string(test::grace(2000ms).count())};
}

void check_clean(const test::StressRun& run, const char* what) {
  INFO(what, ": ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("ok") > 0);
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
  CHECK(run.field("/errors_by_kind/timeout") == 0);
}

}  // namespace

TEST_CASE("a worker far slower than the pool costs only itself, and gets its share back once fast") {
  const std::string socket = test::temp_socket_path();
  const std::string fast_flag = socket + ".fast";
  DaemonConfig config = test::workers_config(socket);
  config.routing.device_timeout = test::grace(1000ms);  // 200 ms a batch is slow, not hung
  test::InProcessDaemon daemon(config, nullptr);
  auto client = test::connect(socket);
  const auto rate = static_cast<unsigned>(test::scaled(3000, 300));
  const double seconds = 6 * test::scale() + 1;

  test::WorkerProcess good(sleeper(socket, "sleep", "2"));
  REQUIRE(test::eventually([&] { return client->daemon_status().workers == 1; }, test::grace(10s)));
  const test::StressRun alone = test::run_stress(paced(socket, rate, seconds));
  check_clean(alone, "the good worker alone");

  test::WorkerProcess slow(sleeper(socket, "slow-unless", "200:2", fast_flag));
  const std::size_t slow_place = place_of(*client, "misbehave-slow-unless");
  REQUIRE(slow_place < 2);  // the good worker holds the other of the first two places
  const auto& devices = daemon.devices();
  // A first batch measures it (it is tried as if as fast as the good one); from then on it gets
  // probes.
  const test::StressRun warm_up = test::run_stress(paced(socket, rate, 2));
  check_clean(warm_up, "while the slow worker is measured");
  REQUIRE(devices.at(slow_place)->batches_ok() > 0);
  const std::uint64_t slow_before = devices.at(slow_place)->batches_ok();
  const std::uint64_t probes_before = devices.at(slow_place)->probes_ok();
  const auto beside_from = std::chrono::steady_clock::now();
  const test::StressRun beside = test::run_stress(paced(socket, rate, seconds));
  // Probes follow the clock, not the load: the stress tool's start and exit (slower under a
  // sanitizer) count too.
  const double beside_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - beside_from).count();
  check_clean(beside, "beside the slow worker");
  const std::uint64_t slow_batches = devices.at(slow_place)->batches_ok() - slow_before;
  const std::uint64_t probes = devices.at(slow_place)->probes_ok() - probes_before;
  const double alone_p99 = alone.field("p99_us"), beside_p99 = beside.field("p99_us");
  MESSAGE("p99 alone ", alone_p99, " us, beside a worker 100x slower ", beside_p99, " us (",
          beside_p99 / alone_p99, "x); the slow worker ran ", slow_batches, " batches and ", probes,
          " probes meanwhile");
  // The bar is 2x; the slack is a VM's scheduling noise on a p99 of a few milliseconds, which a
  // sanitizer multiplies (an ASan run beside the other suites here missed a 9 ms slack). It stays
  // under the 200 ms a request would wait if the router sent it to the slow worker: a p99 of
  // 1,875 requests or more passes only if under 1 % of them did. (Probes are copies: they
  // delay no caller.) Not under TSan: its own p99 there is hundreds of milliseconds (167 ms
  // alone, 636 ms beside in a CI run where the slow worker ran no batch at all), so the bound
  // would measure TSan's pace beside the ASan suite, not the router; the batch counts below
  // still hold there, and the other builds check the latency.
  if (test::slowdown() < 10) CHECK(beside_p99 <= 2 * alone_p99 + 10'000 * test::slowdown());
  CHECK(probes > 0);  // probed, so that it is noticed when it recovers
  const double probe_s = static_cast<double>(Router::kProbeIntervalNs) / 1e9;
  CHECK(static_cast<double>(probes) <= beside_s / probe_s + 2);  // one a kProbeIntervalNs
  CHECK(static_cast<double>(slow_batches + probes) < beside_s * 10);  // and little else

  // Fast again: within 10 s it runs a fair part of the batches (an equal worker would run half).
  std::ofstream(fast_flag).put('1');
  std::vector<std::string> argv{test::built_binary("BATCHD_STRESS_BIN"), "--quiet"};
  for (std::string& arg : paced(socket, rate, 14)) argv.push_back(std::move(arg));
  test::BackgroundRun load(argv);
  const auto flagged = std::chrono::steady_clock::now();
  std::uint64_t slow_then = devices.at(slow_place)->batches_ok();
  std::uint64_t all_then = slow_then + devices.at(1 - slow_place)->batches_ok();
  double recovered_s = -1;
  for (int tick = 0; tick < 12 && recovered_s < 0; ++tick) {
    std::this_thread::sleep_for(1s);
    const std::uint64_t slow_now = devices.at(slow_place)->batches_ok();
    const std::uint64_t all_now = slow_now + devices.at(1 - slow_place)->batches_ok();
    const double share = static_cast<double>(slow_now - slow_then) / static_cast<double>(std::max<std::uint64_t>(all_now - all_then, 1));
    MESSAGE("second ", tick + 1, " after the flag: the recovered worker ran ", 100 * share, " % of the batches");
    if (share >= 0.25) recovered_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - flagged).count();
    slow_then = slow_now;
    all_then = all_now;
  }
  const test::ProcessOutput after = load.wait(test::grace(60s));
  INFO(after.err);
  CHECK(after.exit_code() == 0);
  CHECK(recovered_s > 0);
  CHECK(recovered_s <= 10 * test::slowdown());
}

TEST_CASE("a good worker beside one that hangs after 10 batches: every request answered, none shed") {
  // Issue 46's case as a new user runs it: the daemon's own batching defaults, batchd-worker on
  // the cpu backend, and beside it a worker whose model stops answering on its 11th batch. The
  // good worker's cold first batches must not make it a laggard, and the stalled worker must not
  // be counted on: before, 2 runs of 3 shed about 2,000 of 36,000 requests while the good worker
  // stood idle.
  const std::string socket = test::temp_socket_path();
  DaemonConfig config = test::workers_config(socket);
  config.batch.max_wait = DaemonConfig{}.batch.max_wait;
  config.routing.device_timeout = test::grace(1000ms);
  test::InProcessDaemon daemon(config, nullptr);
  auto client = test::connect(socket);
  test::WorkerProcess good({test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--backend", "cpu",
                            "--concurrency", "1", "--log-level", "warn"});
  // After 10 batches (the worker hung after 20), fewer at a sanitizer's scaled rate: the
  // router may give it few (a TSan run of 3 s at 300 requests/s, and once a debug run beside the
  // sanitizer builds' compiles, gave it fewer than 21, so it never hung).
  test::WorkerProcess hanging(sleeper(socket, "hang-after", std::to_string(test::scaled(10, 3))));
  const std::size_t hanging_place = place_of(*client, "misbehave-hang-after");
  REQUIRE(test::eventually([&] { return client->daemon_status().workers == 2; }, test::grace(10s)));

  const auto rate = static_cast<unsigned>(test::scaled(3000, 300));
  const test::StressRun run = test::run_stress(paced(socket, rate, 6 * test::scale() + 2));
  check_clean(run, "beside a worker that hangs");
  CHECK(run.field("/errors_by_kind/overloaded") == 0);
  // The requests in the hung batches wait for the hang timeout, then run on the good worker;
  // nothing else waits behind the hang.
  const double timeout_us = static_cast<double>(config.routing.device_timeout.count()) * 1e3;
  const double p99_us = run.field("p99_us");
  MESSAGE("p99 ", p99_us, " us against a hang timeout of ", timeout_us, " us; the hanging worker ran ",
          daemon.devices().at(hanging_place)->batches_ok(), " batches");
  CHECK(p99_us <= timeout_us + 100'000 * test::slowdown());
  CHECK(daemon.devices().at(hanging_place)->timeouts() > 0);  // it did hang under the load
}

TEST_CASE("a worker slow only for its first second gets its share back, and carries the load when its peer stalls") {
  // A cold start: 60 ms a batch for the first second after it attaches, then 2 ms, beside a
  // worker at 2 ms that stalls on cue. Judged on its cold batches, it would get probes only; it
  // must get its share within 2 s of turning fast, and take every batch once its peer stalls.
  const std::string socket = test::temp_socket_path();
  const std::string stall_flag = socket + ".stall";
  DaemonConfig config = test::workers_config(socket);
  config.routing.device_timeout = test::grace(1000ms);
  test::InProcessDaemon daemon(config, nullptr);
  auto client = test::connect(socket);
  const auto rate = static_cast<unsigned>(test::scaled(2000, 300));

  test::WorkerProcess peer(sleeper(socket, "hold-if", "2", stall_flag));
  const std::size_t peer_place = place_of(*client, "misbehave-hold-if");
  std::vector<std::string> argv{test::built_binary("BATCHD_STRESS_BIN"), "--quiet"};
  // Long enough for every phase below at the build's pace: the worker's attach and its cold
  // second, its share within 2 s (stretched), and 2 s of its peer stalled.
  const double share_within_s = 2 * test::slowdown();
  for (std::string& arg : paced(socket, rate, 6 + 1.5 * share_within_s)) argv.push_back(std::move(arg));
  test::BackgroundRun load(argv);
  std::this_thread::sleep_for(500ms);
  test::WorkerProcess cold(sleeper(socket, "cold", "60:2:1000"));
  const std::size_t cold_place = place_of(*client, "misbehave-cold");
  const auto attached = std::chrono::steady_clock::now();
  const auto& devices = daemon.devices();
  REQUIRE(cold_place < devices.size());
  REQUIRE(peer_place < devices.size());

  // Its share, a second at a time, from when it turns fast (1 s after attaching).
  std::this_thread::sleep_until(attached + 1s);
  const auto fast_from = std::chrono::steady_clock::now();
  std::uint64_t cold_then = devices.at(cold_place)->batches_ok();
  std::uint64_t all_then = cold_then + devices.at(peer_place)->batches_ok();
  double share_back_s = -1;
  for (int tick = 0; tick < 2 * share_within_s + 2 && share_back_s < 0; ++tick) {
    std::this_thread::sleep_for(500ms);
    const std::uint64_t cold_now = devices.at(cold_place)->batches_ok();
    const std::uint64_t all_now = cold_now + devices.at(peer_place)->batches_ok();
    const double share = static_cast<double>(cold_now - cold_then) /
                         static_cast<double>(std::max<std::uint64_t>(all_now - all_then, 1));
    MESSAGE(0.5 * (tick + 1), " s after turning fast: the cold-started worker ran ", 100 * share, " % of the batches");
    if (share >= 0.25) {
      share_back_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - fast_from).count();
    }
    cold_then = cold_now;
    all_then = all_now;
  }
  CHECK(share_back_s > 0);
  CHECK(share_back_s <= share_within_s);

  // Its peer stalls: every batch from then on is the cold-started worker's, and nobody is shed.
  const std::uint64_t cold_before = devices.at(cold_place)->batches_ok();
  std::ofstream(stall_flag).put('1');
  std::this_thread::sleep_for(2s);
  const std::uint64_t cold_after = devices.at(cold_place)->batches_ok();
  MESSAGE("while its peer stalled, the cold-started worker ran ", cold_after - cold_before, " batches");
  CHECK(cold_after - cold_before > 100);
  const test::ProcessOutput out = load.wait(test::grace(60s));
  INFO(out.err);
  CHECK(out.exit_code() == 0);  // every answer right, none an error (shed or timed out)
  std::remove(stall_flag.c_str());
}

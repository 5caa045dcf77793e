// The adaptive batching policy end to end on the sim backend, each claim against the fixed rule
// or the simulated device's true cost in the same test.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// The benchmarks' GPU model: 2 ms + 20 us per request on 2 devices.
const std::vector<std::string> kGpuModel = {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000",
                                            "--sim-per-item-us", "20"};
// Ten times slower, for loads the load generator and the daemon carry under sanitizers too: batches
// of 64 carry 2 x 64 / 32.8 ms = 3,902 requests/s.
const std::vector<std::string> kSlowModel = {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "20000",
                                             "--sim-per-item-us", "200"};
constexpr double kSlowCapacity64 = 2 * 64 / 0.0328;

std::vector<std::string> plus(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::chrono::nanoseconds time_one(Client& client, const std::string& input) {
  const auto start = std::chrono::steady_clock::now();
  const Result r = client.submit(input, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(r.ok());
  return took;
}

// Requests per second that `threads` closed-loop callers get, every answer checked.
double closed_loop_rps(const std::string& socket, int threads, double seconds) {
  const test::StressRun run = test::run_stress({"--socket", socket, "--expect-sim", "1", "--threads",
                                                std::to_string(threads), "--duration", std::to_string(seconds),
                                                "--input-bytes", "16:64"});
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("wrong") == 0);
  CHECK(run.field("errors") == 0);
  return run.field("rps");
}

}  // namespace

TEST_CASE("a lone request waits about one batch time, not the fixed rule's window") {
  const std::string adaptive_socket = test::temp_socket_path("adaptive.sock");
  const std::string fixed_socket = test::temp_socket_path("fixed.sock");
  test::DaemonProcess adaptive(adaptive_socket, plus(kGpuModel, {"--max-wait-ms", "300"}));
  test::DaemonProcess fixed(fixed_socket, plus(kGpuModel, {"--policy", "fixed", "--max-wait-ms", "300"}));
  auto a = test::connect(adaptive_socket);
  auto f = test::connect(fixed_socket);
  for (int i = 0; i < 3; ++i) {
    const std::string input = "lone " + std::to_string(i);
    // One 2 ms batch (and a wake-up or two) against the whole 300 ms window.
    CHECK(time_one(*a, input) < 150ms);
    CHECK(time_one(*f, input) >= 300ms);
  }
}

TEST_CASE("4 closed-loop callers: adaptive carries many times what fixed 64 / 50 ms does") {
  const std::string adaptive_socket = test::temp_socket_path("adaptive.sock");
  const std::string fixed_socket = test::temp_socket_path("fixed.sock");
  test::DaemonProcess adaptive(adaptive_socket, kGpuModel);
  test::DaemonProcess fixed(fixed_socket, plus(kGpuModel, {"--policy", "fixed", "--max-batch", "64", "--max-wait-ms", "50"}));
  const double fixed_rps = closed_loop_rps(fixed_socket, 4, 2.0);
  const double adaptive_rps = closed_loop_rps(adaptive_socket, 4, 2.0);
  INFO("fixed 64 / 50 ms: " << fixed_rps << " req/s; adaptive: " << adaptive_rps << " req/s");
  // Every fixed batch waits out its 50 ms for 4 requests (about 75/s); adaptive batches go when a
  // device is free (1,960/s at best). The benchmark reports the ratio; 5x leaves room for a
  // sanitizer's slowdown.
  CHECK(adaptive_rps > 5 * fixed_rps);
}

TEST_CASE("the cost fit the daemon publishes is the simulated device's cost") {
  const std::string socket = test::temp_socket_path();
  // 20 ms + 2 ms per request: far above what the host adds to a batch (waking callers, writing
  // answers: tens of microseconds, more under load or a sanitizer), which the daemon's measured
  // batch time rightly includes; and slow enough that the load below is light for any build.
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "20000",
                                      "--sim-per-item-us", "2000"});
  // Poisson arrivals at 200/s (n* about 3): batches of many sizes, which the fit needs to tell
  // fixed from per-request cost. (A closed loop makes batches all of one size.)
  const test::StressRun run = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate", "200",
                                                "--duration", "3", "--input-bytes", "16:64"});
  REQUIRE(run.process.exit_code() == 0);
  auto client = test::connect(socket);
  REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(1).cost_samples > 20; }, 5s));
  const DaemonStatus status = client->daemon_status();
  for (const auto& dev : status.devices) {
    INFO("fitted " << dev.fixed_ns << " ns + " << dev.per_item_ns << " ns/request + " << dev.per_byte_ns
                   << " ns/byte from " << dev.cost_samples << " batches");
    // The fixed part is found (not folded away into the per-request one).
    CHECK(dev.fixed_ns > 10'000'000);
    // Predictions for batches like those it ran: on the model a batch of n (about 40 bytes each)
    // takes 20 ms + n x 2 ms.
    for (const double n : {2.0, 4.0, 8.0}) {
      CAPTURE(n);
      const double predicted = dev.fixed_ns + n * dev.per_item_ns + n * 40 * dev.per_byte_ns;
      const double model = 20'000'000 + n * 2'000'000;
      CHECK(predicted > 0.95 * model);
      CHECK(predicted < 1.15 * model);
    }
  }
}

TEST_CASE("a load step 10% -> 90% -> 10%: every request answered, and the batch size follows") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, kSlowModel);
  auto client = test::connect(socket);
  // Each phase runs 2.5 s; n* is read in its second half, once the arrival rate has followed.
  // p99 bounds: at 10 % nobody waits for the 50 ms ceiling and a queue on top (a batch is 20 to 35 ms
  // here); at 90 % bursts queue behind busy devices, and a sanitizer's host work adds to every batch
  // (205 ms was seen under ASan in CI), so that phase is held to the product's 500 ms p99 budget.
  auto phase = [&](double load, double p99_bound_us, std::uint32_t& target) {
    auto run = std::async(std::launch::async, [&] {
      return test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate",
                               std::to_string(load * kSlowCapacity64), "--duration", "2.5", "--input-bytes",
                               "16:64", "--timeout-ms", "2000"});
    });
    std::this_thread::sleep_for(1800ms);
    target = client->daemon_status().target_batch;
    const test::StressRun out = run.get();
    INFO("load " << load << ": " << out.process.out);
    REQUIRE(out.process.exit_code() == 0);
    CHECK(out.field("errors") == 0);
    CHECK(out.field("wrong") == 0);
    CHECK(out.field("ok") == out.field("sent"));
    CHECK(out.field("p99_us") < p99_bound_us);
    return out.field("p99_us");
  };
  std::uint32_t low_before = 0, high = 0, low_after = 0;
  // Under TSan the daemon's host work is ten times slower and its suite shares the 2 cores with the
  // ASan build's compile: the low phase's p99 was 248 ms there in CI. The bound stretches with the
  // build's slowdown (500 ms under TSan), as every time bound in these tests does.
  const double low_bound_us = std::max(200'000.0, 1000.0 * static_cast<double>(test::grace(50ms).count()));
  const double p99_low = phase(0.1, low_bound_us, low_before);
  const double p99_high = phase(0.9, 500'000, high);
  const double p99_after = phase(0.1, low_bound_us, low_after);
  INFO("n*: " << low_before << " -> " << high << " -> " << low_after << "; p99 us " << p99_low << ", "
              << p99_high << ", " << p99_after);
  // From the rule: about 5 at 10 % (390/s x 20 ms / (1.8 - 0.078)), 64 at 90 %.
  CHECK(high >= 3 * low_before);
  CHECK(high >= 3 * low_after);
}

TEST_CASE("2x overload with 10% high priority: high is never refused and meets its deadline; low and normal are shed") {
  const std::string socket = test::temp_socket_path();
  // Batches of at most 64 on the slow model: 3,902 requests/s; offered twice that. Slots for every
  // request the load generator may have in flight, so the daemon, not the client's slot count,
  // decides who is refused.
  test::DaemonProcess daemon(socket, plus(kSlowModel, {"--max-batch", "64", "--slots-per-client", "16384",
                                                       "--max-input-bytes", "1024", "--max-output-bytes", "1024"}));
  const test::StressRun out = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate",
                                                std::to_string(2 * kSlowCapacity64), "--duration", "3", "--warmup",
                                                "1", "--input-bytes", "16:64", "--timeout-ms", "1000",
                                                "--priority-mix", "high:10,normal:60,low:30"});
  INFO(out.process.out);
  CHECK(out.field("wrong") == 0);
  const double high_sent = out.field("/by_class/high/sent");
  CHECK(high_sent > 0);
  CHECK(out.field("/by_class/high/errors") == 0);
  CHECK(out.field("/by_class/high/ok") == high_sent);
  CHECK(out.field("/by_class/high/p99_us") < 1'000'000);
  // The overload is shed, lowest class first.
  const double low_shed = out.field("/by_class/low/errors") / out.field("/by_class/low/sent");
  const double normal_shed = out.field("/by_class/normal/errors") / out.field("/by_class/normal/sent");
  CHECK(low_shed > 0.5);
  // Under TSan the daemon's host work is the bottleneck, both classes are shed at 80-90 % and
  // normal's admitted requests also time out behind it: there the order holds within a margin
  // (0.84 vs 0.92 was seen in CI); the plain build holds it exactly.
  const double order_margin = test::slowdown() > 1.5 ? 0.15 : 0.0;
  CHECK(low_shed >= normal_shed - order_margin);
  // And what was shed was refused at once, not left to time out.
  auto client = test::connect(socket);
  const DaemonStatus status = client->daemon_status();
  CHECK(status.requests_shed_by_class[static_cast<std::size_t>(Priority::kHigh)] == 0);
  CHECK(status.requests_shed_by_class[static_cast<std::size_t>(Priority::kLow)] > 0);
}

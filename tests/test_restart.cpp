// Daemon restart recovery: the batchd binary is killed with SIGKILL while requests are in flight
// and started again on the same socket; the client re-attaches on its own and every request is
// answered, correctly, unless its own deadline passes first.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <random>

#include "client_lib/client.hpp"
#include "backend/reference_batchstring.hpp"
#include "shm/futex.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// Room for every request in flight while the daemon is down (5,000/s for up to ~0.5 s), with
// small slots so the segment stays small.
const std::vector<std::string> kRoomyDaemon = {"--slots-per-client", "8192", "--max-input-bytes", "1024",
                                               "--max-output-bytes", "1024"};

// The fixed rule, so that a long window really holds requests in flight.
std::vector<std::string> daemon_args(const std::string& max_wait_ms) {
  std::vector<std::string> args = kRoomyDaemon;
  args.insert(args.end(), {"--policy", "fixed", "--max-wait-ms", max_wait_ms});
  return args;
}

struct Tally {
  std::atomic<int> ok{0}, wrong{0}, failed{0};
  std::mutex mu;
  std::vector<std::string> errors;  // the first few, for the failure message

  void record(const std::string& input, const Result& r) {
    if (!r.ok()) {
      failed.fetch_add(1);
      std::lock_guard lock(mu);
      if (errors.size() < 5) errors.push_back(std::string(error_code_name(r.error().code)) + ": " + r.error().message);
    } else if (r.output() != reference_batchstring(input, 1)) {
      wrong.fetch_add(1);
    } else {
      ok.fetch_add(1);
    }
  }
  std::string first_errors() {
    std::lock_guard lock(mu);
    std::string out;
    for (const auto& e : errors) out += e + "\n";
    return out;
  }
};

}  // namespace

TEST_CASE("kill -9 with requests in flight: a restarted daemon answers every one of them") {
  const std::string path = test::temp_socket_path();
  // A 300 ms batch window, and batches large enough for all of them, keep the first requests in
  // the daemon's hands when it dies.
  std::vector<std::string> holding = daemon_args("300");
  holding.insert(holding.end(), {"--max-batch", "1024"});
  auto daemon = std::make_unique<test::DaemonProcess>(path, holding);
  const pid_t first_pid = daemon->pid();
  auto client = test::connect(path);
  Tally tally;
  const int threads = 8, per_thread = 20, async_count = 200;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const std::string input = "sync-" + std::to_string(t) + "-" + std::to_string(i);
        tally.record(input, client->submit(input, 10s));
      }
    });
  }
  std::atomic<int> async_done{0};
  for (int i = 0; i < async_count; ++i) {
    const std::string input = "async-" + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 10s, [&, input](Result&& r) {
      tally.record(input, r);
      async_done.fetch_add(1);
    }).has_value());
  }
  std::this_thread::sleep_for(100ms);
  CHECK(tally.ok.load() == 0);  // all still in flight
  daemon->kill9();
  CHECK(test::eventually([&] { return !client->connected(); }, 2s));
  // Submitted while no daemon is there: waits for the next one.
  REQUIRE_FALSE(client->submit_async("while-down", 10s, [&](Result&& r) {
    tally.record("while-down", r);
    async_done.fetch_add(1);
  }).has_value());
  std::this_thread::sleep_for(150ms);
  daemon = std::make_unique<test::DaemonProcess>(path, daemon_args("2"));
  CHECK(test::eventually([&] { client->poll(); return async_done.load() == async_count + 1; }, 10s));
  for (auto& w : workers) w.join();
  INFO(tally.first_errors());
  CHECK(tally.failed.load() == 0);
  CHECK(tally.wrong.load() == 0);
  CHECK(tally.ok.load() == threads * per_thread + async_count + 1);
  CHECK(client->connected());
  CHECK(client->daemon_status().daemon_pid != static_cast<std::uint32_t>(first_pid));
}

TEST_CASE("a daemon that stays down: each caller gets daemon_unavailable at its own deadline") {
  const std::string path = test::temp_socket_path();
  auto daemon = std::make_unique<test::DaemonProcess>(path, daemon_args("1000"));
  auto client = test::connect(path);
  // One request in the dead daemon's hands, one submitted after it died, one async.
  const auto start = std::chrono::steady_clock::now();
  std::optional<Result> in_flight;
  std::chrono::steady_clock::duration in_flight_took{};
  std::thread holder([&] {
    in_flight = client->submit("held by the daemon that dies", 600ms);
    in_flight_took = std::chrono::steady_clock::now() - start;
  });
  std::this_thread::sleep_for(100ms);
  daemon->kill9();
  CHECK(test::eventually([&] { return !client->connected(); }, 2s));

  const auto sync_start = std::chrono::steady_clock::now();
  Result late = client->submit("submitted with no daemon", 300ms);
  const auto sync_took = std::chrono::steady_clock::now() - sync_start;
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == ErrorCode::kDaemonUnavailable);
  CHECK(late.error().message.find(path) != std::string::npos);
  CHECK(sync_took >= 300ms);
  CHECK(sync_took < 300ms + test::grace(250ms));

  std::optional<Result> async_result;
  const auto async_start = std::chrono::steady_clock::now();
  REQUIRE_FALSE(client->submit_async("async with no daemon", 300ms,
                                     [&](Result&& r) { async_result = std::move(r); }).has_value());
  while (!async_result && std::chrono::steady_clock::now() - async_start < 2s) {
    client->poll();
    std::this_thread::sleep_for(1ms);
  }
  const auto async_took = std::chrono::steady_clock::now() - async_start;
  REQUIRE(async_result.has_value());
  CHECK(async_result->error().code == ErrorCode::kDaemonUnavailable);
  CHECK(async_took >= 300ms);
  CHECK(async_took < 300ms + test::grace(250ms));

  holder.join();
  REQUIRE(in_flight.has_value());
  REQUIRE_FALSE(in_flight->ok());
  CHECK(in_flight->error().code == ErrorCode::kDaemonUnavailable);
  CHECK(in_flight_took >= 600ms);
  CHECK(in_flight_took < 600ms + test::grace(250ms));

  // The slots those requests held are back, and a daemon that returns is used again.
  daemon = std::make_unique<test::DaemonProcess>(path, daemon_args("2"));
  Result after = client->submit("back again", 5s);
  REQUIRE(after.ok());
  CHECK(after.output() == reference_batchstring("back again", 1));
  CHECK(client->connected());
}

namespace {

std::int64_t percentile(std::vector<std::int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<std::size_t>(p * static_cast<double>(values.size())))];
}

// Open loop from one thread: request i is due at start + i / rate and its latency counts from
// then, so a stall in this loop shows up as latency rather than as a slower send rate.
struct OpenLoop {
  Client& client;
  std::uint64_t rate;
  Tally tally;
  std::vector<std::int64_t> latency_ns;  // per request; -1 until answered
  std::uint64_t answered = 0;

  void run(std::chrono::nanoseconds duration, const std::string& tag) {
    const std::uint64_t count = static_cast<std::uint64_t>(duration.count()) * rate / 1'000'000'000;
    latency_ns.assign(count, -1);
    const std::int64_t start = shm::monotonic_ns();
    const std::int64_t period = 1'000'000'000 / static_cast<std::int64_t>(rate);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::int64_t due = start + static_cast<std::int64_t>(i) * period;
      while (shm::monotonic_ns() < due) {
        client.poll();
        std::this_thread::sleep_for(100us);
      }
      std::string input = tag + "-" + std::to_string(i);
      auto error = client.submit_async(input, 5s, [this, i, due, input](Result&& r) {
        latency_ns[i] = shm::monotonic_ns() - due;
        ++answered;
        tally.record(input, r);
      });
      if (error) {
        ++answered;
        tally.record(input, Result::failure(error->code, error->message));
      }
    }
    const std::int64_t give_up = shm::monotonic_ns() + 10'000'000'000;
    while (answered < count && shm::monotonic_ns() < give_up) {
      client.poll();
      std::this_thread::sleep_for(200us);
    }
  }
  [[nodiscard]] std::vector<std::int64_t> answered_latencies() const {
    std::vector<std::int64_t> out;
    for (std::int64_t l : latency_ns) if (l >= 0) out.push_back(l);
    return out;
  }
};

}  // namespace

TEST_CASE("chaos: open loop while the daemon is killed with -9 three times and restarted") {
  const std::string path = test::temp_socket_path();
  std::unique_ptr<test::DaemonProcess> daemon = std::make_unique<test::DaemonProcess>(path, daemon_args("2"));
  auto client = test::connect(path);
  const std::uint64_t rate = test::scaled(5000, 500);
  const auto duration = std::chrono::seconds(std::max<std::int64_t>(4, static_cast<std::int64_t>(20 * test::scale())));

  OpenLoop baseline{*client, rate};
  baseline.run(1s, "baseline");
  REQUIRE(baseline.tally.ok.load() == static_cast<int>(baseline.latency_ns.size()));
  const std::int64_t baseline_p99 = percentile(baseline.answered_latencies(), 0.99);

  std::mt19937_64 rng(20250101);
  std::vector<std::int64_t> kill_at_ms;
  std::uniform_int_distribution<std::int64_t> when(500, std::chrono::milliseconds(duration).count() - 1000);
  for (int k = 0; k < 3; ++k) kill_at_ms.push_back(when(rng));
  std::sort(kill_at_ms.begin(), kill_at_ms.end());
  std::vector<pid_t> pids{daemon->pid()};
  std::thread killer([&] {
    const auto start = std::chrono::steady_clock::now();
    std::uniform_int_distribution<int> down_ms(100, 300);
    for (const std::int64_t at : kill_at_ms) {
      std::this_thread::sleep_until(start + std::chrono::milliseconds(at));
      daemon->kill9();
      std::this_thread::sleep_for(std::chrono::milliseconds(down_ms(rng)));
      daemon = std::make_unique<test::DaemonProcess>(path, daemon_args("2"));  // as systemd would
      pids.push_back(daemon->pid());
    }
  });
  OpenLoop chaos{*client, rate};
  chaos.run(duration, "chaos");
  killer.join();

  const std::vector<std::int64_t> latencies = chaos.answered_latencies();
  const std::int64_t max_ns = latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  const std::uint64_t sent = chaos.latency_ns.size();
  MESSAGE("chaos: ", sent, " requests at ", rate, "/s over ", duration.count(), " s, daemons ", pids.size(),
          "; answered ", chaos.answered, ", lost ", sent - chaos.answered, ", wrong ", chaos.tally.wrong.load(),
          ", errors ", chaos.tally.failed.load());
  MESSAGE("latency: baseline p99 ", baseline_p99 / 1000, " us; chaos p50 ", percentile(latencies, 0.5) / 1000,
          " us, p99 ", percentile(latencies, 0.99) / 1000, " us, max ", max_ns / 1000,
          " us; worst added latency (max - baseline p99) ", (max_ns - baseline_p99) / 1000, " us");
  INFO(chaos.tally.first_errors());
  CHECK(pids.size() == 4);
  CHECK(chaos.answered == sent);
  CHECK(chaos.tally.failed.load() == 0);
  CHECK(chaos.tally.wrong.load() == 0);
  CHECK(chaos.tally.ok.load() == static_cast<int>(sent));
  // The worst a request suffered is one outage (at most 300 ms down) plus the new daemon's start
  // and the client's re-attach; a client that re-attached late, or only on a later request's
  // behalf, would add far more.
  CHECK(std::chrono::nanoseconds(max_ns - baseline_p99) < 300ms + test::grace(700ms));
}

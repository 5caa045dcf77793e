// The device router on the sim backend: faulty and hanging devices, poison inputs, a total
// outage and its recovery, and load balancing away from a slow device.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>

#include "client_lib/client.hpp"
#include "daemon/sim_backend.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

DaemonConfig sim_config(const SimOptions& sim, double max_wait_ms) {
  DaemonConfig c;
  c.socket_path = test::temp_socket_path();
  c.backend = "sim";
  c.sim = sim;
  c.batch.max_wait = std::chrono::nanoseconds(static_cast<std::int64_t>(max_wait_ms * 1e6));
  c.segment = shm::SegmentParams{1024, 4096, 8192};
  c.routing.device_timeout = 200ms;
  c.routing.backoff = BackoffPolicy{50'000'000, 500'000'000, 10'000'000'000};
  return c;
}

struct Tally {
  std::atomic<std::uint64_t> ok{0}, wrong{0};
  std::mutex mu;
  std::map<ErrorCode, std::uint64_t> errors;
  std::vector<std::string> messages;

  void record(const Result& r, const std::string& expected) {
    if (r.ok()) {
      (r.output() == expected ? ok : wrong).fetch_add(1);
      return;
    }
    std::lock_guard lock(mu);
    ++errors[r.error().code];
    if (messages.size() < 8) messages.push_back(r.error().message);
  }
  std::uint64_t error_count() {
    std::lock_guard lock(mu);
    std::uint64_t n = 0;
    for (auto& [code, count] : errors) n += count;
    return n;
  }
};

// Submits `count` requests asynchronously as one burst and waits for every callback.
void burst(Client& client, const std::vector<std::string>& inputs, unsigned repeat, Tally& tally) {
  std::atomic<std::size_t> answered{0};
  for (const auto& input : inputs) {
    auto refused = client.submit_async(input, 10s, [&, input](Result&& r) {
      tally.record(r, sim_expected_output(input, repeat));
      answered.fetch_add(1);
    });
    REQUIRE_FALSE(refused.has_value());
  }
  REQUIRE(test::eventually([&] { client.poll(); return answered.load() == inputs.size(); }, 20s));
}

}  // namespace

TEST_CASE("sim: a device failing every 5th batch and a hanging one lose nothing and get less work") {
  SimOptions sim;
  sim.devices = 4;
  sim.fixed_us = 300;
  sim.per_item_us = 5;
  sim.repeat = 2;
  sim.fail_every = {{1, 5}};
  sim.hang_devices = {2};
  test::InProcessDaemon daemon(sim_config(sim, 1.0), nullptr);
  auto client = test::connect(daemon.socket_path());
  const int threads = 16;
  const std::uint64_t per_thread = test::scaled(6250, 60);  // 100,000 requests at scale 1
  Tally tally;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 7);
      for (std::uint64_t i = 0; i < per_thread; ++i) {
        const std::string input = std::to_string(t) + "/" + std::to_string(i) + " " +
                                  test::random_utf8(rng, rng() % 64);
        tally.record(client->submit(input, 10s), sim_expected_output(input, 2));
      }
    });
  }
  for (auto& w : workers) w.join();
  const auto& devices = daemon.devices();
  std::uint64_t batches[4];
  for (int d = 0; d < 4; ++d) batches[d] = devices[d]->batches_ok() + devices[d]->batches_failed();
  MESSAGE("requests ", threads * per_thread, ": ok ", tally.ok.load(), ", wrong ", tally.wrong.load(),
          ", errors ", tally.error_count());
  MESSAGE("batches per device (ok+failed): ", batches[0], " ", batches[1], " ", batches[2], " ",
          batches[3], "; device 1 failed ", devices[1]->batches_failed(), ", marked unhealthy ",
          devices[1]->times_marked_unhealthy(), " times; device 2 timeouts ", devices[2]->timeouts());
  for (const std::string& message : tally.messages) MESSAGE("error: ", message);
  CHECK(tally.wrong.load() == 0);
  CHECK(tally.error_count() == 0);
  CHECK(tally.ok.load() == threads * per_thread);
  // Less work than the healthy devices. Not less than each: routing by expected completion may
  // leave one healthy device little while the cores are contended (measured slower, it becomes a
  // laggard for a while: a TSan run gave 2,289 / 45 / 0 / 12 batches), so the two healthy
  // devices are compared as one.
  const std::uint64_t healthy = batches[0] + batches[3];
  CHECK(batches[1] < std::max(batches[0], batches[3]));
  CHECK(batches[2] < std::max(batches[0], batches[3]));
  CHECK(4 * (batches[1] + batches[2]) < healthy);
  CHECK(devices[1]->batches_failed() > 0);
  CHECK(devices[2]->timeouts() > 0);

  // What a client (batchctl, the front-end's /metrics) sees of the same, from the status page.
  // The page is published periodically: wait for a publication that has seen every answer.
  DaemonStatus status;
  CHECK(test::eventually(
      [&] { return (status = client->daemon_status()).requests_ok >= threads * per_thread; }, 5s));
  CHECK(status.backend == "sim");
  REQUIRE(status.devices.size() == 4);
  // Hanging, so never healthy; whether it is unhealthy or being probed right now is timing.
  CHECK(status.devices[2].state != "healthy");
  CHECK(status.healthy_devices < 4);
  CHECK(status.devices[2].timeouts == devices[2]->timeouts());
  CHECK(status.devices[0].batches_ok == devices[0]->batches_ok());
  CHECK(status.requests_ok >= threads * per_thread);
  CHECK(status.in_flight == 0);
  CHECK(status.clients == 1);
  CHECK(status.age_ns < std::chrono::nanoseconds(test::grace(1s)).count());
  std::uint64_t histogram_total = 0;
  for (auto count : status.batch_sizes) histogram_total += count;
  CHECK(histogram_total == status.batches);
}

TEST_CASE("sim: a poison input fails alone and the rest of its batch is answered") {
  SimOptions sim;
  sim.devices = 4;
  sim.fixed_us = 200;
  sim.per_item_us = 2;
  sim.poison_prefix = "POISON";
  // A long window: the 64 requests below fill exactly one batch.
  test::InProcessDaemon daemon(sim_config(sim, 2000.0), nullptr);
  auto client = test::connect(daemon.socket_path());
  for (int poisons : {1, 2}) {
    CAPTURE(poisons);
    std::vector<std::string> inputs;
    for (int i = 0; i < 64; ++i) inputs.push_back("input " + std::to_string(poisons) + "-" + std::to_string(i));
    inputs[17] = "POISON one";
    if (poisons == 2) inputs[50] = "POISON two";
    const std::uint64_t batches_before = daemon.stats().batches.load();
    Tally tally;
    burst(*client, inputs, 1, tally);
    CHECK(tally.ok.load() == 64U - static_cast<unsigned>(poisons));
    CHECK(tally.wrong.load() == 0);
    CHECK(tally.errors[ErrorCode::kBackendError] == static_cast<unsigned>(poisons));
    CHECK(tally.error_count() == static_cast<unsigned>(poisons));
    REQUIRE_FALSE(tally.messages.empty());
    CHECK(tally.messages[0].find("poison") != std::string::npos);
    MESSAGE(poisons, " poison: completed in ", daemon.stats().batches.load() - batches_before,
            " batches after splitting");
  }
  // Isolation did not cost the healthy devices their health.
  Result after = client->submit("healthy again", 5s);
  REQUIRE(after.ok());
  CHECK(after.output() == sim_expected_output("healthy again", 1));
}

TEST_CASE("sim: with every device failing callers get 'backend unavailable' in time, then service resumes") {
  SimOptions sim;
  sim.devices = 2;
  sim.fixed_us = 100;
  sim.per_item_us = 1;
  sim.outage_ms = 1500;
  test::InProcessDaemon daemon(sim_config(sim, 0.0), nullptr);
  auto client = test::connect(daemon.socket_path());
  std::uint64_t unavailable = 0, other_errors = 0, slow = 0;
  const auto outage_end = std::chrono::steady_clock::now() + 1200ms;
  while (std::chrono::steady_clock::now() < outage_end) {
    const auto start = std::chrono::steady_clock::now();
    Result r = client->submit("during the outage", 1s);
    if (std::chrono::steady_clock::now() - start > 1s + test::grace(100ms)) ++slow;
    REQUIRE_FALSE(r.ok());
    if (r.error().code == ErrorCode::kBackendUnavailable) {
      ++unavailable;
      CHECK(r.error().message.find("unavailable") != std::string::npos);
    } else {
      CHECK(r.error().code == ErrorCode::kBackendError);  // while the devices were being found out
      ++other_errors;
    }
    std::this_thread::sleep_for(1ms);
  }
  MESSAGE("during the outage: ", unavailable, " backend unavailable, ", other_errors,
          " backend errors before both devices were marked unhealthy");
  CHECK(slow == 0);
  CHECK(unavailable > other_errors);
  // The outage ends at 1.5 s; probes after the back-off bring the devices back.
  bool resumed = test::eventually([&] { return client->submit("after", 1s).ok(); }, 10s);
  CHECK(resumed);
  for (int i = 0; i < 20; ++i) CHECK(client->submit("steady " + std::to_string(i), 2s).ok());
}

TEST_CASE("sim: a slow device gets less work") {
  SimOptions sim;
  sim.devices = 2;
  sim.fixed_us = 500;
  sim.per_item_us = 10;
  sim.slow = {{1, 4.0}};
  test::InProcessDaemon daemon(sim_config(sim, 1.0), nullptr);
  auto client = test::connect(daemon.socket_path());
  Tally tally;
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < static_cast<int>(test::scaled(400, 50)); ++i) {
        const std::string input = "slow-test " + std::to_string(t) + "/" + std::to_string(i);
        tally.record(client->submit(input, 10s), sim_expected_output(input, 1));
      }
    });
  }
  for (auto& w : workers) w.join();
  CHECK(tally.error_count() == 0);
  CHECK(tally.wrong.load() == 0);
  const auto& devices = daemon.devices();
  MESSAGE("requests on the fast device ", devices[0]->items_ok(), ", on the 4x slower one ",
          devices[1]->items_ok());
  // How much less is a measurement (bench/service.py, "slow device share"); here only that the
  // router noticed at all.
  CHECK(devices[0]->items_ok() > devices[1]->items_ok());
  CHECK(devices[0]->items_ok() + devices[1]->items_ok() == tally.ok.load());
}

namespace {

// The test backends' answer: each input reversed.
BackendStatus answer_reversed(const BatchInput& in, BatchOutput& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::string_view input = in.at(i);
    char* o = out.append(input.size());
    std::copy(input.rbegin(), input.rend(), o);
  }
  return BackendStatus::success();
}

// Answers each input reversed, and fails any batch holding an input that starts with "poison".
// Declares itself cheap, so the router may run it on the drain thread.
class InlineBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "inline-test"; }
  [[nodiscard]] unsigned devices() const noexcept override { return 2; }
  [[nodiscard]] bool runs_inline() const noexcept override { return true; }
  BackendStatus run(LaneId, const BatchInput& in, BatchOutput& out) override {
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in.at(i).starts_with("poison")) return BackendStatus::failure("poisoned input");
    }
    return answer_reversed(in, out);
  }
};

std::string reversed(std::string s) {
  std::reverse(s.begin(), s.end());
  return s;
}

}  // namespace

TEST_CASE("inline: a cheap backend runs batches on the drain thread, and a failure there takes the lanes' path") {
  DaemonConfig config = sim_config(SimOptions{}, 0.0);
  test::InProcessDaemon daemon(config, std::make_unique<InlineBackend>());
  auto client = test::connect(daemon.socket_path());
  const auto inline_batches = [&] {
    std::uint64_t n = 0;
    for (const auto& d : daemon.devices()) n += d->batches_inline();
    return n;
  };
  for (int i = 0; i < 200; ++i) {
    const std::string input = "request-" + std::to_string(i);
    const Result r = client->submit(input, 5s);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(r.output() == reversed(input));
  }
  // The first batch on each device goes to its worker, which measures it; cheap ones then run inline.
  CHECK(inline_batches() > 0);

  // Retried on the other device, then checked with the canary: the input's own error, and the
  // devices stay in service.
  const Result poisoned = client->submit("poison pill", 5s);
  REQUIRE_FALSE(poisoned.ok());
  CHECK(poisoned.error().code == ErrorCode::kBackendError);
  CHECK(poisoned.error().message.find("poisoned input") != std::string::npos);
  CHECK(daemon.devices()[0]->batches_failed() + daemon.devices()[1]->batches_failed() >= 2);
  for (int i = 0; i < 50; ++i) {
    const std::string input = "after-" + std::to_string(i);
    const Result r = client->submit(input, 5s);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    CHECK(r.output() == reversed(input));
  }
}

namespace {

// One request's bad luck with two faulty devices: the first run of "victim" hangs (until the
// router gives up on it), its second fails with an error; every other run answers the input
// reversed. Which devices those runs land on is the router's choice.
class HangThenFailBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "hang-then-fail"; }
  [[nodiscard]] unsigned devices() const noexcept override { return 3; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override {
    bool victim = false;
    for (std::size_t i = 0; i < in.size(); ++i) victim = victim || in.at(i) == "victim";
    if (victim) {
      unsigned run = 0;
      {
        std::unique_lock lock(mu_);
        victim_devices_.push_back(lane.device);
        run = static_cast<unsigned>(victim_devices_.size());
        if (run == 1) {
          cv_.wait(lock, [&] { return released_; });
          return BackendStatus::failure("hung");
        }
      }
      if (run == 2) return BackendStatus::failure("a flaky device's error");
    }
    return answer_reversed(in, out);
  }
  void device_hung(unsigned /*device*/) noexcept override { release(); }
  void shutdown() noexcept override { release(); }

  std::vector<unsigned> victim_devices() {
    std::lock_guard lock(mu_);
    return victim_devices_;
  }

 private:
  void release() noexcept {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::vector<unsigned> victim_devices_;
};

}  // namespace

TEST_CASE("a request that hung on one device and failed on another runs on a third, not blamed") {
  auto backend = std::make_unique<HangThenFailBackend>();
  HangThenFailBackend& fake = *backend;
  test::InProcessDaemon daemon(sim_config(SimOptions{}, 0.0), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  // A known-good input for the canary: the flaky device passes it, as such a device does.
  for (int i = 0; i < 20; ++i) {
    const std::string input = "good-" + std::to_string(i);
    const Result r = client->submit(input, 5s);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
  }
  const Result r = client->submit("victim", 10s);
  CHECK_MESSAGE(r.ok(), (r.ok() ? std::string() : r.error().message));
  if (r.ok()) CHECK(r.output() == reversed("victim"));
  const std::vector<unsigned> runs = fake.victim_devices();
  REQUIRE(runs.size() == 3);  // hung, failed, answered
  CHECK(runs[0] != runs[1]);
  CHECK(runs[2] != runs[0]);
  CHECK(runs[2] != runs[1]);
  CHECK(daemon.devices()[runs[0]]->timeouts() == 1);
}

// Device-memory feedback end to end. In process, a backend whose memory the test sets: a device
// past its high-water mark gets nothing and one short of memory only batches that fit; a batch
// that fits nowhere waits for memory, runs anyway after the device timeout, or at once when no
// device could ever hold it; a batch whose device filled while it queued there is held at launch.
// Then the sim backend under a cycling memory pressure with
// batchd-stress's load: no out-of-memory failure with feedback on, some with it off.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client_lib/client.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// Two devices whose memory readings the test sets. A batch needs per_byte device bytes per input
// byte, and fails as out of memory when that is more than its device has free (as the sim does);
// answers are the inputs reversed. Counts batches, the largest input bytes, and failures.
class MemoryTestBackend final : public Backend {
 public:
  static constexpr unsigned kDevices = 2;
  explicit MemoryTestBackend(std::uint64_t per_byte) : per_byte_(per_byte) {}

  void set(unsigned device, std::uint64_t total, std::uint64_t free) {
    std::lock_guard lock(mu_);
    memory_[device] = {total, free, 0};
  }
  [[nodiscard]] std::uint64_t batches(unsigned device) const { return batches_[device].load(); }
  [[nodiscard]] std::uint64_t largest_bytes(unsigned device) const { return largest_[device].load(); }
  [[nodiscard]] std::uint64_t out_of_memory() const { return oom_.load(); }
  // Runs of an input that starts with "gate" wait, once their memory is checked, until the gate
  // opens; at_gate: how many wait now.
  void open_gate() {
    {
      std::lock_guard lock(mu_);
      gate_open_ = true;
    }
    gate_cv_.notify_all();
  }
  [[nodiscard]] int at_gate() const {
    std::lock_guard lock(mu_);
    return at_gate_;
  }

  [[nodiscard]] std::string_view name() const noexcept override { return "memory-test"; }
  [[nodiscard]] unsigned devices() const noexcept override { return kDevices; }
  [[nodiscard]] DeviceMemory memory(unsigned device) const noexcept override {
    std::lock_guard lock(mu_);
    return memory_[device];
  }
  [[nodiscard]] std::uint64_t batch_memory_bytes(std::size_t, std::uint64_t input_bytes) const noexcept override {
    return per_byte_ * input_bytes;
  }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override {
    const std::uint64_t bytes = in.offsets.back() - in.offsets.front();
    batches_[lane.device].fetch_add(1);
    std::uint64_t seen = largest_[lane.device].load();
    while (seen < bytes && !largest_[lane.device].compare_exchange_weak(seen, bytes)) {
    }
    if (batch_memory_bytes(in.size(), bytes) > memory(lane.device).free_bytes) {
      oom_.fetch_add(1);
      return BackendStatus::failure("out of memory on device " + std::to_string(lane.device));
    }
    if (in.at(0).starts_with("gate")) {
      std::unique_lock lock(mu_);
      ++at_gate_;
      gate_cv_.wait(lock, [&] { return gate_open_; });
      --at_gate_;
    }
    std::this_thread::sleep_for(1ms);
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::string_view input = in.at(i);
      std::copy(input.rbegin(), input.rend(), out.append(input.size()));
    }
    return BackendStatus::success();
  }

 private:
  std::uint64_t per_byte_;
  mutable std::mutex mu_;
  DeviceMemory memory_[kDevices];  // guarded by mu_
  std::condition_variable gate_cv_;
  bool gate_open_ = false;  // guarded by mu_
  int at_gate_ = 0;         // guarded by mu_
  std::atomic<std::uint64_t> batches_[kDevices]{};
  std::atomic<std::uint64_t> largest_[kDevices]{};
  std::atomic<std::uint64_t> oom_{0};
};

DaemonConfig config_for(std::chrono::milliseconds device_timeout, bool feedback = true) {
  DaemonConfig c;
  c.socket_path = test::temp_socket_path();
  c.batch.policy = PolicyKind::kFixed;
  c.batch.max_batch = 64;
  c.batch.max_wait = 5ms;
  c.segment = shm::SegmentParams{1024, 4096, 8192};
  c.routing.device_timeout = device_timeout;
  c.routing.memory.enabled = feedback;
  return c;
}

std::string reversed(std::string s) {
  std::reverse(s.begin(), s.end());
  return s;
}

// `threads` callers each submit `each` inputs of `bytes` bytes; returns how many were answered
// right.
std::uint64_t submit_from_threads(Client& client, int threads, int each, std::size_t bytes) {
  std::atomic<std::uint64_t> ok{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < threads; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        std::string input = std::to_string(t) + "-" + std::to_string(i) + "-";
        input.resize(bytes, 'x');
        const Result r = client.submit(input, 10s);
        if (r.ok() && r.output() == reversed(input)) ok.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  return ok.load();
}

// How long one submit of `input` took, and its result.
std::pair<std::chrono::milliseconds, Result> timed_submit(Client& client, const std::string& input) {
  const auto start = std::chrono::steady_clock::now();
  Result r = client.submit(input, 10s);
  return {std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start),
          std::move(r)};
}

}  // namespace

TEST_CASE("a device past its high-water mark gets nothing; one short of memory only batches that fit") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 100 * kMiB, 5 * kMiB);   // 95 % used: past the 90 % mark
  mem.set(1, 100 * kMiB, 12 * kMiB);  // 88 % used: room 2 MiB, batches of up to 2048 input bytes
  test::InProcessDaemon daemon(config_for(5s), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  // 32 callers of 200-byte inputs: unchecked, the 5 ms window would gather up to 32 (6,400 bytes).
  CHECK(submit_from_threads(*client, 32, 8, 200) == 32 * 8);
  CHECK(mem.batches(0) == 0);
  CHECK(mem.batches(1) > 0);
  CHECK(mem.largest_bytes(1) <= 2048);
  CHECK(mem.out_of_memory() == 0);
  REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(1).memory_total_bytes != 0; }, 2s));
  const DaemonStatus status = client->daemon_status();
  CHECK(status.devices[0].byte_budget == 0);
  CHECK(status.devices[1].byte_budget == 2048);
  CHECK(status.devices[1].memory_total_bytes == 100 * kMiB);
  CHECK(status.devices[1].memory_free_bytes == 12 * kMiB);
  CHECK(status.devices[0].state == "healthy");  // short of memory is not unhealthy
}

TEST_CASE("with no device's memory to spare a batch waits, and goes once memory frees") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 100 * kMiB, 5 * kMiB);
  mem.set(1, 100 * kMiB, 5 * kMiB);
  test::InProcessDaemon daemon(config_for(10s), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  auto answer = std::async(std::launch::async, [&] { return timed_submit(*client, "wait for memory"); });
  CHECK(answer.wait_for(400ms) == std::future_status::timeout);
  CHECK(mem.batches(0) + mem.batches(1) == 0);
  mem.set(1, 100 * kMiB, 50 * kMiB);
  REQUIRE(answer.wait_for(test::grace(1000ms)) == std::future_status::ready);
  // Not a structured binding: clang 14 (the sanitizer builds') cannot capture one in doctest's lambdas.
  const auto timed = answer.get();
  const std::chrono::milliseconds took = timed.first;
  const Result& result = timed.second;
  REQUIRE_MESSAGE(result.ok(), result.error().message);
  CHECK(result.output() == reversed("wait for memory"));
  // Memory freed 400 ms after the submitting thread was started; its own clock starts a little later.
  CHECK(took >= 350ms);
  CHECK(mem.batches(0) == 0);
  CHECK(mem.out_of_memory() == 0);
}

TEST_CASE("a batch queued while its device's memory fills waits at launch instead of running out of it") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 100 * kMiB, 100 * kMiB);
  mem.set(1, 100 * kMiB, 5 * kMiB);  // past the mark: device 0 takes everything
  test::InProcessDaemon daemon(config_for(10s), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  auto first = std::async(std::launch::async, [&] { return timed_submit(*client, "gate: runs first"); });
  REQUIRE(test::eventually([&] { return mem.at_gate() == 1; }, test::grace(2000ms)));
  const std::string big(2000, 'q');  // needs 2,048,000 device bytes
  auto second = std::async(std::launch::async, [&] { return timed_submit(*client, big); });
  // Queued on device 0 behind the first run, as it fitted then.
  REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(0).outstanding_requests == 2; },
                           test::grace(2000ms)));
  mem.set(0, 100 * kMiB, 1 * kMiB);  // another tenant takes the memory meanwhile
  mem.open_gate();
  REQUIRE(first.wait_for(test::grace(1000ms)) == std::future_status::ready);
  CHECK(first.get().second.ok());
  CHECK(second.wait_for(300ms) == std::future_status::timeout);
  CHECK(mem.out_of_memory() == 0);
  mem.set(0, 100 * kMiB, 100 * kMiB);
  REQUIRE(second.wait_for(test::grace(1000ms)) == std::future_status::ready);
  const Result result = second.get().second;
  REQUIRE_MESSAGE(result.ok(), result.error().message);
  CHECK(result.output() == reversed(big));
  CHECK(mem.out_of_memory() == 0);
}

TEST_CASE("a batch held for the device timeout runs anyway") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 100 * kMiB, 5 * kMiB);  // past the mark, yet 5 MiB free: a small batch still runs
  mem.set(1, 100 * kMiB, 5 * kMiB);
  test::InProcessDaemon daemon(config_for(300ms), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  const auto timed = timed_submit(*client, "runs anyway");
  const std::chrono::milliseconds took = timed.first;
  const Result& result = timed.second;
  REQUIRE_MESSAGE(result.ok(), result.error().message);
  CHECK(took >= 300ms);
  CHECK(took < 300ms + test::grace(1000ms));
}

TEST_CASE("an input no device could ever hold runs at once and gets its own out-of-memory error") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 3 * kMiB, 3 * kMiB);  // empty; 2.7 MiB under the mark
  mem.set(1, 3 * kMiB, 3 * kMiB);
  test::InProcessDaemon daemon(config_for(10s), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  const auto timed = timed_submit(*client, std::string(4000, 'h'));  // needs 3.9 MiB
  const std::chrono::milliseconds took = timed.first;
  const Result& result = timed.second;
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().code == ErrorCode::kBackendError);
  CHECK(result.error().message.find("out of memory") != std::string::npos);
  CHECK(took < test::grace(2000ms));
  // The devices stay in service for inputs that fit.
  CHECK(submit_from_threads(*client, 4, 5, 100) == 20);
}

TEST_CASE("feedback off: memory is shown, and batches go whatever it says") {
  auto backend = std::make_unique<MemoryTestBackend>(1024);
  MemoryTestBackend& mem = *backend;
  mem.set(0, 100 * kMiB, 95 * kMiB);
  mem.set(1, 100 * kMiB, 95 * kMiB);
  test::InProcessDaemon daemon(config_for(5s, false), std::move(backend));
  auto client = test::connect(daemon.socket_path());
  CHECK(submit_from_threads(*client, 4, 5, 100) == 20);
  mem.set(0, 100 * kMiB, 1 * kMiB);  // 99 % used: feedback would send nothing to either
  mem.set(1, 100 * kMiB, 1 * kMiB);
  std::this_thread::sleep_for(200ms);  // a few watchdog readings
  CHECK(submit_from_threads(*client, 4, 5, 100) == 20);
  const DaemonStatus status = client->daemon_status();
  CHECK(status.devices[0].memory_total_bytes == 100 * kMiB);
  CHECK(status.devices[0].memory_free_bytes == 1 * kMiB);
  CHECK(status.devices[0].byte_budget == status.max_batch_bytes);
}

namespace {

// The e2e's pressure: 2 sim devices of 20 ms + 200 us per request (slow enough for the sanitizer
// builds to keep up) with 1 MiB of memory each, a batch needing 1,280 device bytes per input
// byte, and another tenant that ramps up to half of each device over 1 s, holds 1.5 s, leaves
// over 1 s and stays away 1.5 s. The fixed rule's 50 ms window gathers about 20 requests of 40
// bytes at 400 requests/s (1 MiB of device memory): past what is free at the peak (512 KiB) and
// at times even without the tenant, while the budget keeps batches within the 90 % mark (327
// input bytes at the peak, 737 without the tenant), which still carries the load.
const std::vector<std::string> kPressure = {
    "--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "20000", "--sim-per-item-us", "200",
    "--policy", "fixed", "--max-batch", "64", "--max-wait-ms", "50",
    "--sim-memory-mib", "1", "--sim-memory-per-byte", "1280", "--sim-memory-other", "50:1000,50:1500,0:1000,0:1500"};

struct PressureRun {
  test::StressRun stress;
  std::uint64_t device_failures = 0;  // batches that failed on a device: here, out of memory
  std::uint64_t smallest_budget = UINT64_MAX, largest_budget = 0;
};

PressureRun run_under_pressure(const std::string& feedback, double rate, double seconds) {
  const std::string socket = test::temp_socket_path(feedback + ".sock");
  std::vector<std::string> args = kPressure;
  args.insert(args.end(), {"--memory-feedback", feedback});
  test::DaemonProcess daemon(socket, args);
  auto client = test::connect(socket);
  PressureRun run;
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done.load()) {
      for (const auto& dev : client->daemon_status().devices) {
        run.smallest_budget = std::min(run.smallest_budget, dev.byte_budget);
        run.largest_budget = std::max(run.largest_budget, dev.byte_budget);
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  run.stress = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate", std::to_string(rate),
                                 "--duration", std::to_string(seconds), "--input-bytes", "16:64",
                                 "--timeout-ms", "5000"});
  done.store(true);
  watcher.join();
  // Every answer is in; the counters reach the status page within a publication or two.
  std::this_thread::sleep_for(150ms);
  for (const auto& dev : client->daemon_status().devices) run.device_failures += dev.batches_failed;
  return run;
}

}  // namespace

TEST_CASE("sim under cycling memory pressure: no out-of-memory failure with feedback, some without") {
  const double rate = 400;
  const double seconds = 5.0;
  const PressureRun on = run_under_pressure("on", rate, seconds);
  const PressureRun off = run_under_pressure("off", rate, seconds);
  MESSAGE("feedback on: sent ", on.stress.field("sent"), ", ok ", on.stress.field("ok"), ", errors ",
          on.stress.field("errors"), ", device batch failures ", on.device_failures, ", byte budget ",
          on.smallest_budget, "..", on.largest_budget);
  MESSAGE("feedback off: sent ", off.stress.field("sent"), ", ok ", off.stress.field("ok"), ", errors ",
          off.stress.field("errors"), ", device batch failures ", off.device_failures, ", byte budget ",
          off.smallest_budget, "..", off.largest_budget);
  CHECK(on.stress.process.exit_code() == 0);
  CHECK(on.stress.field("wrong") == 0);
  CHECK(on.stress.field("errors") == 0);
  CHECK(on.stress.field("ok") == on.stress.field("sent"));
  CHECK(on.device_failures == 0);
  // floor(0.9 x 1 MiB - 512 KiB) / 1280 at the peak, floor(0.9 x 1 MiB) / 1280 without the tenant.
  CHECK(on.smallest_budget == 327);
  CHECK(on.largest_budget == 737);
  CHECK(off.stress.field("wrong") == 0);
  CHECK(off.device_failures > 0);
  CHECK(off.smallest_budget == 8 << 20);  // nothing held back: the policy's limit
}

// Worker processes (--backend workers): a worker is a device that comes and goes. Each failure a
// worker can have costs a retry of its batches elsewhere, never a lost or wrong answer: SIGKILL in
// the middle of a batch, SIGSTOP past the hang timeout, garbage in its answer, a graceful stop and
// a rolling replacement under load, a model that throws on one input. Workers are real processes
// (batchd-worker, and tests/worker_misbehave.cpp); the daemon runs in this process, so TSan sees
// its lanes, the links and the attach thread together.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "client_lib/attach.hpp"
#include "status/status_metrics.hpp"
#include "tests/helpers.hpp"
#include "tests/worker_process.hpp"

using namespace batchd;
using namespace std::chrono_literals;
using test::WorkerProcess;
using test::workers_config;

namespace {

std::vector<std::string> cpu_worker(const std::string& socket, const std::string& version = "1") {
  return {test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--concurrency", "2", "--version", version,
          "--once", "--log-level", "warn"};
}

std::vector<std::string> misbehaving(const std::string& socket, const std::string& mode, const std::string& arg = "") {
  std::vector<std::string> argv{test::built_binary("BATCHD_MISBEHAVE_BIN"), socket, mode};
  if (!arg.empty()) argv.push_back(arg);
  return argv;
}

// Waits until the daemon publishes `n` attached workers.
void await_workers(const Client& client, std::uint32_t n) {
  INFO("waiting for " << n << " attached worker(s)");
  REQUIRE(test::eventually([&] { return client.daemon_status().workers == n; }, test::grace(10s)));
}

// Load from `threads` threads, each checking every answer, until stop.
class Load {
 public:
  Load(Client& client, unsigned threads, const std::string& tag) {
    for (unsigned t = 0; t < threads; ++t) {
      threads_.emplace_back([this, &client, t, tag] {
        for (std::uint64_t i = 0; !stop_.load(); ++i) {
          const std::string input = tag + " " + std::to_string(t) + " " + std::to_string(i);
          const Result r = client.submit(input, 20s);
          if (!r.ok()) {
            std::lock_guard lock(mu_);
            if (first_error_.empty()) first_error_ = r.error().message;
          }
          (r.ok() && r.output() == reference_batchstring(input, 1) ? ok_ : bad_).fetch_add(1);
        }
      });
    }
  }
  ~Load() { finish(); }
  void finish() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  [[nodiscard]] std::uint64_t ok() const { return ok_.load(); }
  [[nodiscard]] std::uint64_t bad() const { return bad_.load(); }
  [[nodiscard]] std::string first_error() const {
    std::lock_guard lock(mu_);
    return first_error_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> ok_{0}, bad_{0};
  mutable std::mutex mu_;
  std::string first_error_;
  std::vector<std::thread> threads_;
};

// Runs until `ok` more answers came (so the work reached the workers), or fails the test.
void await_answers(const Load& load, std::uint64_t more) {
  const std::uint64_t target = load.ok() + more;
  REQUIRE(test::eventually([&] { return load.ok() >= target; }, test::grace(20s)));
}

}  // namespace

TEST_CASE("a worker process runs the batches; the status names it; an empty place is absent") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  const DaemonStatus empty = client->daemon_status();
  CHECK(empty.workers == 0);
  CHECK(empty.min_workers == 1);
  CHECK(empty.healthy_devices == 0);
  WorkerProcess worker(cpu_worker(socket, "7.1"));
  await_workers(*client, 1);
  for (int i = 0; i < 200; ++i) {
    const std::string input = "hello " + std::to_string(i);
    const Result r = client->submit(input, 10s);
    REQUIRE(r.ok());
    CHECK(r.output() == reference_batchstring(input, 1));
  }
  // Every batch's hand-off is timed (one piece per batch here: they are small).
  REQUIRE(test::eventually([&] {
    const DaemonStatus now = client->daemon_status();
    const auto& device = now.devices.at(0);
    return device.worker_batches > 0 && device.worker_handoff.count() == device.worker_batches;
  }, 5s));
  const DaemonStatus status = client->daemon_status();
  CHECK(status.healthy_devices == 1);
  CHECK(status.devices.at(0).state == "healthy");
  CHECK(status.devices.at(0).worker_name == "cpu");
  CHECK(status.devices.at(0).worker_version == "7.1");
  CHECK(status.devices.at(0).worker_pid == static_cast<std::uint32_t>(worker.pid()));
  CHECK(status.devices.at(0).worker_lanes == 2);
  CHECK(status.devices.at(0).worker_handoff.count() > 0);
  CHECK(status.devices.at(1).state == "absent");
  CHECK(status.devices.at(1).worker_pid == 0);
  REQUIRE(status.attached_workers.size() == 1);
  CHECK(status.attached_workers[0].model == "batchstring");
  CHECK(status.attached_workers[0].device == 0);
  CHECK(status.attached_workers[0].pid == static_cast<std::uint32_t>(worker.pid()));

  std::string metrics;
  render_daemon_status(&status, metrics);
  CHECK(metrics.find("batchd_daemon_workers 1\n") != std::string::npos);
  CHECK(metrics.find("batchd_daemon_min_workers 1\n") != std::string::npos);
  CHECK(metrics.find("batchd_worker_info{device=\"0\",model=\"batchstring\",name=\"cpu\",version=\"7.1\",pid=\"" +
                     std::to_string(worker.pid()) + "\",lanes=\"2\"} 1") != std::string::npos);
  REQUIRE_FALSE(status.models.empty());
  CHECK(metrics.find("batchd_daemon_device_state{model=\"batchstring\",version=\"" + status.models[0].version +
                     "\",device=\"1\",state=\"absent\"} 1") != std::string::npos);
  CHECK(metrics.find("batchd_worker_handoff_seconds_count{device=\"0\",model=\"batchstring\"} " +
                     std::to_string(status.devices.at(0).worker_handoff.count())) != std::string::npos);
  const std::string ctl = test::built_binary("BATCHD_CTL_BIN");
  const test::ProcessOutput text = test::run_captured({ctl, "--socket", socket}, 10s);
  CHECK(text.out.find("worker: cpu 7.1 (pid " + std::to_string(worker.pid()) + ", 2 lanes") != std::string::npos);
  CHECK(text.out.find("workers: 1 attached, 1 needed") != std::string::npos);
  const test::ProcessOutput json = test::run_captured({ctl, "--socket", socket, "--json"}, 10s);
  CHECK(json.out.find("\"workers\":1,\"min_workers\":1") != std::string::npos);
  CHECK(json.out.find("\"worker\":{\"name\":\"cpu\",\"version\":\"7.1\",\"pid\":" + std::to_string(worker.pid())) !=
        std::string::npos);
  CHECK(json.out.find("\"state\":\"absent\"") != std::string::npos);
}

TEST_CASE("with no worker a request waits within its deadline: it times out, or a worker that comes in time answers it") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  const auto started = std::chrono::steady_clock::now();
  const Result late = client->submit("nobody runs this", 300ms);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == ErrorCode::kTimeout);
  CHECK(std::chrono::steady_clock::now() - started >= 250ms);

  std::optional<Result> answered;
  std::thread waiting([&] { answered = client->submit("wait for a worker", 20s); });
  std::this_thread::sleep_for(200ms);
  WorkerProcess worker(cpu_worker(socket));
  waiting.join();
  REQUIRE(answered.has_value());
  const std::string why = answered->ok() ? std::string() : answered->error().message;
  INFO(why);
  REQUIRE(answered->ok());
  CHECK(answered->output() == reference_batchstring("wait for a worker", 1));
}

TEST_CASE("a worker killed with SIGKILL in the middle of a batch: its batches run on another, 0 lost, 0 wrong") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  WorkerProcess holder(misbehaving(socket, "hold"));  // place 0: takes batches, never answers
  await_workers(*client, 1);
  Load load(*client, 4, "killed");
  REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(0).outstanding_requests > 0; }, 10s));
  WorkerProcess good(cpu_worker(socket));
  await_workers(*client, 2);
  holder.signal(SIGKILL);
  REQUIRE(holder.wait_exit(5s).has_value());
  await_answers(load, 300);
  load.finish();
  INFO(load.first_error());
  CHECK(load.bad() == 0);
  CHECK(load.ok() >= 300);
  CHECK(test::eventually([&] { return client->daemon_status().workers == 1; }, 5s));
}

TEST_CASE("a worker stopped with SIGSTOP is declared hung, its batches run elsewhere, and it is dropped") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  WorkerProcess slow(misbehaving(socket, "sleep", "50"));
  await_workers(*client, 1);
  WorkerProcess good(cpu_worker(socket));
  await_workers(*client, 2);
  Load load(*client, 4, "stopped");
  REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(0).outstanding_requests > 0; }, 10s));
  slow.signal(SIGSTOP);
  REQUIRE(test::eventually([&] { return daemon.stats().workers_dropped.load() >= 1; }, test::grace(10s)));
  await_answers(load, 200);
  slow.signal(SIGCONT);
  // Its late answer is ignored; it finds the daemon gone from its connection and exits.
  const std::optional<int> exit = slow.wait_exit(test::grace(10s));
  REQUIRE(exit.has_value());
  CHECK(test::describe_exit(*exit) == "exit code 0");
  await_answers(load, 100);
  load.finish();
  INFO(load.first_error());
  CHECK(load.bad() == 0);
  CHECK(test::eventually([&] { return client->daemon_status().workers == 1; }, 5s));
}

TEST_CASE("a worker that answers garbage is dropped; its batch runs elsewhere; others are unaffected") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  WorkerProcess good(cpu_worker(socket));
  await_workers(*client, 1);
  Load load(*client, 4, "garbage");
  for (const char* mode : {"bad-offsets", "too-few", "too-many", "oversize", "bad-status", "scribble"}) {
    CAPTURE(mode);
    const std::uint64_t dropped = daemon.stats().workers_dropped.load();
    WorkerProcess bad(misbehaving(socket, mode));
    // It is dropped after its first answer, which the load brings it soon.
    const std::optional<int> exit = bad.wait_exit(test::grace(10s));
    REQUIRE(exit.has_value());
    CHECK(test::describe_exit(*exit) == "exit code 0");
    // The daemon hangs up first and counts the drop when its loop sees the connection end.
    CHECK(test::eventually([&] { return daemon.stats().workers_dropped.load() == dropped + 1; }, 5s));
    await_answers(load, 50);
  }
  load.finish();
  INFO(load.first_error());
  CHECK(load.bad() == 0);
  CHECK(test::eventually([&] { return client->daemon_status().workers == 1; }, 5s));
}

TEST_CASE("a worker reads its batches in place in the daemon's input arena, and no way of writing the arena works") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  // It serves 40 batches and exits; a second worker takes what follows.
  WorkerProcess probe(misbehaving(socket, "arena-probe", "40"));
  await_workers(*client, 1);
  Load load(*client, 4, "arena");
  const std::optional<int> exit = probe.wait_exit(test::grace(20s));
  REQUIRE(exit.has_value());
  // 3: a write reached the arena; 4: a batch came copied instead of in place.
  CHECK(test::describe_exit(*exit) == "exit code 0");
  CHECK(daemon.stats().worker_pieces_copied.load() == 0);
  WorkerProcess good(cpu_worker(socket));
  await_workers(*client, 1);
  await_answers(load, 100);
  load.finish();
  INFO(load.first_error());
  CHECK(load.bad() == 0);
}

TEST_CASE("SIGTERM stops a worker gracefully; a rolling replacement under load fails nothing") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);

  SUBCASE("the running batch is answered by the stopping worker, which then exits") {
    WorkerProcess slow(misbehaving(socket, "sleep", "300"));
    await_workers(*client, 1);
    std::optional<Result> held;
    std::thread caller([&] { held = client->submit("held while stopping", 20s); });
    REQUIRE(test::eventually([&] { return client->daemon_status().devices.at(0).outstanding_requests > 0; }, 10s));
    slow.signal(SIGTERM);
    const std::optional<int> exit = slow.wait_exit(test::grace(10s));
    caller.join();
    REQUIRE(exit.has_value());
    CHECK(test::describe_exit(*exit) == "exit code 0");
    REQUIRE(held.has_value());
    REQUIRE(held->ok());
    CHECK(held->output() == reference_batchstring("held while stopping", 1));
    CHECK(daemon.stats().workers_dropped.load() == 0);
  }

  SUBCASE("version 2 replaces version 1 under load") {
    WorkerProcess old_a(cpu_worker(socket, "1")), old_b(cpu_worker(socket, "1"));
    await_workers(*client, 2);
    Load load(*client, 4, "rolling");
    await_answers(load, 200);
    WorkerProcess new_a(cpu_worker(socket, "2")), new_b(cpu_worker(socket, "2"));
    await_workers(*client, 4);
    old_a.signal(SIGTERM);
    old_b.signal(SIGTERM);
    for (WorkerProcess* old : {&old_a, &old_b}) {
      const std::optional<int> exit = old->wait_exit(test::grace(10s));
      REQUIRE(exit.has_value());
      CHECK(test::describe_exit(*exit) == "exit code 0");
    }
    await_answers(load, 200);
    load.finish();
    INFO(load.first_error());
    CHECK(load.bad() == 0);
    REQUIRE(test::eventually([&] { return client->daemon_status().workers == 2; }, 5s));
    const DaemonStatus status = client->daemon_status();
    for (const auto& device : status.devices) {
      if (device.worker_pid != 0) CHECK(device.worker_version == "2");
    }
  }
}

TEST_CASE("a model that throws on one input: that input alone gets the error, the others are answered") {
  // The split halves run from the input arena; with a pool of one batch they are made beyond it,
  // on the heap, and copied into the worker's buffer instead: both ways answer the same.
  for (const bool pool_of_one : {false, true}) {
    CAPTURE(pool_of_one);
    const std::string socket = test::temp_socket_path();
    DaemonConfig config = workers_config(socket);
    if (pool_of_one) {
      config.workers.max_workers = 1;
      config.workers.lanes_per_worker = 1;
      config.routing.spare_batches = 0;
    }
    test::InProcessDaemon daemon(config, nullptr);
    auto client = test::connect(socket);
    WorkerProcess worker(misbehaving(socket, "fail-on", "poison"));
    await_workers(*client, 1);
    std::atomic<std::uint64_t> ok{0}, bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          const std::string input = "fine " + std::to_string(t) + " " + std::to_string(i);
          const Result r = client->submit(input, 20s);
          (r.ok() && r.output() == reference_batchstring(input, 1) ? ok : bad).fetch_add(1);
        }
      });
    }
    // The poisoned input goes in one submission with others, so that its batch holds more than it
    // and must be split (a batch of it alone would fail without a split, and copy nothing).
    const std::vector<std::string> companions{"fine a", "fine b", "fine c", "fine d", "fine e", "fine f", "fine g"};
    std::vector<std::string_view> submission{"poison pill"};
    submission.insert(submission.end(), companions.begin(), companions.end());
    const std::vector<Result> results = client->submit_many(submission, 20s);
    for (auto& t : threads) t.join();
    REQUIRE(results.size() == submission.size());
    for (std::size_t i = 1; i < results.size(); ++i) {
      CHECK((results[i].ok() && results[i].output() == reference_batchstring(submission[i], 1)));
    }
    const Result& poisoned = results[0];
    REQUIRE_FALSE(poisoned.ok());
    CHECK(poisoned.error().code == ErrorCode::kBackendError);
    CHECK(poisoned.error().message.find("poisoned input") != std::string::npos);
    CHECK(ok.load() == 200);
    CHECK(bad.load() == 0);
    CHECK(daemon.stats().workers_dropped.load() == 0);
    if (pool_of_one) CHECK(daemon.stats().worker_pieces_copied.load() > 0);
  }
}

TEST_CASE("the worker role: refused by other backends, for bad limits, and for talk after attaching") {
  const std::string socket = test::temp_socket_path();
  shm::WorkerHello hello{};
  hello.hello = {shm::kAttachMagic, shm::kProtocolVersion, shm::kHelloWorker, 0};
  hello.concurrency = 1;
  hello.max_inputs = 64;
  hello.max_bytes = 1 << 20;

  SUBCASE("a daemon with its own backend") {
    DaemonConfig config = workers_config(socket);
    config.backend = "cpu";
    test::InProcessDaemon daemon(config, nullptr);
    auto attached = attach_worker_to_daemon(socket, 2s, hello);
    REQUIRE_FALSE(attached);
    CHECK(attached.error().code == ErrorCode::kProtocolError);
    CHECK(attached.error().message.find("--backend workers") != std::string::npos);
  }
  SUBCASE("limits out of range") {
    test::InProcessDaemon daemon(workers_config(socket), nullptr);
    hello.concurrency = 0;
    auto attached = attach_worker_to_daemon(socket, 2s, hello);
    REQUIRE_FALSE(attached);
    CHECK(attached.error().message.find("out of range") != std::string::npos);
  }
  SUBCASE("anything but the stopping notice after attaching") {
    test::InProcessDaemon daemon(workers_config(socket), nullptr);
    auto attached = attach_worker_to_daemon(socket, 2s, hello);
    REQUIRE(attached);
    const char junk[8] = "garbage";
    REQUIRE(::send(attached->connection.get(), junk, sizeof(junk), 0) == sizeof(junk));
    char byte = 0;
    CHECK(::recv(attached->connection.get(), &byte, 1, 0) == 0);  // hung up on
    CHECK(test::eventually([&] { return daemon.stats().workers_dropped.load() == 1; }, 5s));
  }
}

TEST_CASE("attach and kill cycles leave the daemon's descriptors and mappings where they started") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "workers", "--max-workers", "2"});
  auto client = test::connect(socket);
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    if (what == "fds") {
      n = std::distance(std::filesystem::directory_iterator("/proc/" + std::to_string(daemon.pid()) + "/fd"),
                        std::filesystem::directory_iterator());
    } else {
      std::ifstream maps("/proc/" + std::to_string(daemon.pid()) + "/maps");
      for (std::string line; std::getline(maps, line);) n += line.find("memfd:batchd-worker") != std::string::npos;
    }
    return n;
  };
  WorkerProcess first(cpu_worker(socket));
  await_workers(*client, 1);
  first.signal(SIGKILL);
  REQUIRE(first.wait_exit(5s).has_value());
  await_workers(*client, 0);
  const std::size_t fds = count("fds");
  CHECK(count("maps") == 0);
  const std::uint64_t cycles = test::scaled(40, 10);
  for (std::uint64_t i = 0; i < cycles; ++i) {
    WorkerProcess worker(cpu_worker(socket));
    await_workers(*client, 1);
    worker.signal(SIGKILL);
    REQUIRE(worker.wait_exit(5s).has_value());
    await_workers(*client, 0);
  }
  // The reaper closes connections on its own thread: give it a moment.
  CHECK(test::eventually([&] { return count("fds") == fds; }, 5s));
  CHECK(count("maps") == 0);
  const Result r = [&] {
    WorkerProcess worker(cpu_worker(socket));
    return client->submit("still serving", 20s);
  }();
  REQUIRE(r.ok());
  CHECK(r.output() == reference_batchstring("still serving", 1));
}

TEST_CASE("a worker written in C through the C ABI answers, fails one input alone, and stops on SIGTERM") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  WorkerProcess worker({test::built_binary("BATCHD_C_WORKER_BIN"), socket});
  await_workers(*client, 1);
  for (int i = 0; i < 50; ++i) {
    const std::string input = "from C " + std::to_string(i);
    const Result r = client->submit(input, 10s);
    REQUIRE(r.ok());
    CHECK(r.output() == "c:" + input);
  }
  const Result refused = client->submit("fail me", 10s);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kBackendError);
  CHECK(refused.error().message.find("the C model refuses 'fail me'") != std::string::npos);
  CHECK(client->daemon_status().devices.at(0).worker_name == "c-model");
  worker.signal(SIGTERM);
  const std::optional<int> exit = worker.wait_exit(test::grace(10s));
  REQUIRE(exit.has_value());
  CHECK(test::describe_exit(*exit) == "exit code 0");
}

TEST_CASE("a plug-in run by batchd-worker crashes its worker, not the daemon; an input that crashes every worker fails alone") {
  const std::string socket = test::temp_socket_path();
  test::InProcessDaemon daemon(workers_config(socket), nullptr);
  auto client = test::connect(socket);
  const char* dir = std::getenv("BATCHD_TEST_PLUGIN_DIR");
  REQUIRE(dir != nullptr);
  // Echoes its inputs, and aborts the process on the input "crash" (tests/plugins/failing_plugin.c).
  const std::string plugin = std::string(dir) + "/failing.so";
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int i = 0; i < 4; ++i) {
    workers.push_back(std::make_unique<WorkerProcess>(std::vector<std::string>{
        test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--plugin", plugin, "--once", "--log-level",
        "error"}));
  }
  await_workers(*client, 4);
  const Result echoed = client->submit("hello", 10s);
  REQUIRE(echoed.ok());
  CHECK(echoed.output() == "hello");
  // Each worker that runs it dies; after three the batch is suspected, and the input alone fails.
  const Result crashed = client->submit("crash", 20s);
  REQUIRE_FALSE(crashed.ok());
  CHECK(crashed.error().code == ErrorCode::kBackendError);
  CHECK(crashed.error().message.find("went away 3 times") != std::string::npos);
  REQUIRE(test::eventually([&] { return client->daemon_status().workers == 1; }, 10s));
  const Result after = client->submit("still serving", 10s);
  REQUIRE(after.ok());
  CHECK(after.output() == "still serving");
  CHECK(test::eventually([&] { return client->daemon_status().dead_letters == 1; }, 5s));
}

TEST_CASE("only the daemon's own user attaches as a worker unless --worker-allow-uid says so; --allow-uid is not enough") {
  constexpr uid_t kOther = 12345;
  const test::RunAs other{kOther, kOther};
  const std::string socket = test::temp_socket_path();
  REQUIRE(::chmod(std::filesystem::path(socket).parent_path().c_str(), 0711) == 0);
  const std::vector<std::string> worker{test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--once"};
  {
    test::DaemonProcess daemon(socket, {"--backend", "workers", "--allow-uid", std::to_string(kOther)});
    const test::ProcessOutput refused = test::run_captured(worker, 30s, other);
    INFO("stdout: ", refused.out, "\nstderr: ", refused.err);
    CHECK(refused.exit_code() == 1);
    CHECK((refused.out + refused.err).find("uid 12345 may not attach as a worker") != std::string::npos);
  }
  test::DaemonProcess daemon(socket, {"--backend", "workers", "--worker-allow-uid", std::to_string(kOther)});
  std::optional<test::ProcessOutput> served;
  std::thread run([&] { served = test::run_captured(worker, 60s, other); });
  auto client = test::connect(socket);
  await_workers(*client, 1);
  const Result r = client->submit("from another user's worker", 10s);
  daemon.stop();  // the worker sees its daemon go, and --once makes it exit 75
  run.join();
  REQUIRE(r.ok());
  CHECK(r.output() == reference_batchstring("from another user's worker", 1));
  REQUIRE(served.has_value());
  CHECK(served->exit_code() == 75);
}

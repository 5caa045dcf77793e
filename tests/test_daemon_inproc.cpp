// The daemon and the client library in one process: many threads through one client, a full
// client, a client that breaks the protocol, a backend that misbehaves, a graceful stop, and
// cancelled requests at each stage. This suite is what the TSan build watches.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <sys/mman.h>
#include <sys/socket.h>

#include "client_lib/attach.hpp"
#include "client_lib/client.hpp"
#include "daemon/cpu_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "shm/memfd_region.hpp"
#include "shm/ring.hpp"
#include "shm/segment_view.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

DaemonConfig small_config(double max_wait_ms = 1.0) {
  DaemonConfig c;
  c.socket_path = test::temp_socket_path();
  c.batch.max_wait = std::chrono::nanoseconds(static_cast<std::int64_t>(max_wait_ms * 1e6));
  c.segment = shm::SegmentParams{256, 8192, 4096};
  return c;
}

// Holds every batch until released, so requests stay in flight as long as a test needs.
class GateBackend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "gate"; }
  unsigned devices() const noexcept override { return 1; }
  BackendStatus run(LaneId, const BatchInput& in, BatchOutput& out) override {
    std::unique_lock lock(mu_);
    ++entered_;
    cv_.wait(lock, [&] { return open_; });
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
      const auto s = in.at(i);
      std::copy(s.begin(), s.end(), out.append(s.size()));
      ran_.emplace_back(s);
    }
    return BackendStatus::success();
  }
  std::vector<std::string> ran() {
    std::lock_guard lock(mu_);
    return ran_;
  }
  // Batches the backend has started running (held at the gate while it is closed).
  std::size_t entered() {
    std::lock_guard lock(mu_);
    return entered_;
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  std::size_t entered_ = 0;
  std::vector<std::string> ran_;  // every input the backend ran
};

// Returns one result too few: the daemon must not trust the count.
class ShortBackend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "short"; }
  unsigned devices() const noexcept override { return 1; }
  BackendStatus run(LaneId, const BatchInput& in, BatchOutput& out) override {
    out.clear();
    for (std::size_t i = 0; i + 1 < in.size(); ++i) out.append(1)[0] = 'x';
    return BackendStatus::success();
  }
};

}  // namespace

TEST_CASE("many threads funnel through one client and each gets its own answer") {
  test::InProcessDaemon daemon(small_config(0.5), std::make_unique<CpuBackend>(1, 2));
  auto client = test::connect(daemon.socket_path());
  const int threads = 16;
  const std::uint64_t per_thread = test::scaled(2000, 50);
  std::atomic<std::uint64_t> ok{0}, wrong{0}, failed{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t));
      for (std::uint64_t i = 0; i < per_thread; ++i) {
        const std::string input = std::to_string(t) + ":" + std::to_string(i) + ":" +
                                  test::random_utf8(rng, rng() % 200);
        Result r = client->submit(input, 10s);
        if (!r.ok()) {
          failed.fetch_add(1);
        } else if (r.output() != reference_batchstring(input, 1)) {
          wrong.fetch_add(1);
        } else {
          ok.fetch_add(1);
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  CHECK(failed.load() == 0);
  CHECK(wrong.load() == 0);
  CHECK(ok.load() == threads * per_thread);
  CHECK(daemon.stats().batches.load() < daemon.stats().requests_ok.load());  // batching happened
}

TEST_CASE("submit_many and submit_many_async: each input its own answer, refusals alone") {
  test::InProcessDaemon daemon(small_config(0.5), std::make_unique<CpuBackend>(1, 1));
  auto client = test::connect(daemon.socket_path());
  std::vector<std::string> inputs;
  for (int i = 0; i < 100; ++i) inputs.push_back("many:" + std::to_string(i));
  inputs[13] = "\xc3\x28 bad";
  inputs[57] = std::string(8193, 'a');  // over max_input_bytes
  const std::vector<std::string_view> views(inputs.begin(), inputs.end());
  const auto check = [&](std::size_t i, const Result& r) {
    if (i == 13) {
      CHECK((!r.ok() && r.error().code == ErrorCode::kInvalidUtf8));
    } else if (i == 57) {
      CHECK((!r.ok() && r.error().code == ErrorCode::kTooLarge));
    } else {
      REQUIRE_MESSAGE(r.ok(), r.error().message);
      CHECK(r.output() == reference_batchstring(inputs[i], 1));
    }
  };
  const std::vector<Result> results = client->submit_many(views, 10s);
  REQUIRE(results.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) check(i, results[i]);

  std::vector<Client::AsyncSubmission> submissions(inputs.size());
  std::vector<int> calls(inputs.size(), 0);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    submissions[i].input = inputs[i];
    submissions[i].done = [&, i](Result&& r) {
      ++calls[i];
      check(i, r);
    };
  }
  CHECK(client->submit_many_async(submissions, 10s) == inputs.size() - 2);
  CHECK((submissions[13].refused && submissions[13].refused->code == ErrorCode::kInvalidUtf8));
  CHECK((submissions[57].refused && submissions[57].refused->code == ErrorCode::kTooLarge));
  // poll_wait sleeps on the daemon's completion events, with no eventfd and no helper thread.
  REQUIRE(test::eventually([&] {
    client->poll_wait(100ms);
    return std::count(calls.begin(), calls.end(), 1) == static_cast<long>(inputs.size() - 2);
  }, 10s));
  CHECK(calls[13] == 0);
  CHECK(calls[57] == 0);
  CHECK(std::count_if(calls.begin(), calls.end(), [](int c) { return c > 1; }) == 0);
}

TEST_CASE("poll_wait returns once answers come, and a cancel wakes it") {
  // Batches wait 10 s (the fixed rule), so only a cancel can finish the request before then.
  DaemonConfig config = small_config(10'000.0);
  config.batch.policy = PolicyKind::kFixed;
  test::InProcessDaemon daemon(config, std::make_unique<CpuBackend>(1, 1));
  auto client = test::connect(daemon.socket_path());
  std::optional<Result> got;
  std::uint64_t id = 0;
  REQUIRE_FALSE(client->submit_async("held", 60s, [&](Result&& r) { got = std::move(r); }, &id));
  CHECK(client->poll_wait(50ms) == 0);  // nothing finished: it waited out max_wait
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    client->cancel(id);
  });
  const auto started = std::chrono::steady_clock::now();
  std::size_t finished = 0;
  while (finished == 0 && std::chrono::steady_clock::now() - started < 10s) finished = client->poll_wait(20s);
  canceller.join();
  REQUIRE(got.has_value());
  CHECK((!got->ok() && got->error().code == ErrorCode::kCancelled));
  // Woken by the cancel (or, if it raced the sleep, at its max_wait): far sooner than 20 s.
  CHECK(std::chrono::steady_clock::now() - started < 10s);
}

TEST_CASE("a client with every slot in flight is told it is overloaded") {
  auto backend = std::make_unique<GateBackend>();
  GateBackend* gate = backend.get();
  DaemonConfig config = small_config(0.0);
  config.segment.slot_count = 8;
  test::InProcessDaemon daemon(config, std::move(backend));
  auto client = test::connect(daemon.socket_path());
  std::atomic<int> answered{0}, correct{0};
  for (int i = 0; i < 8; ++i) {
    const std::string input = "req-" + std::to_string(i);
    auto err = client->submit_async(input, 10s, [&, input](Result&& r) {
      answered.fetch_add(1);
      if (r.ok() && r.output() == input) correct.fetch_add(1);
    });
    REQUIRE_FALSE(err.has_value());
  }
  auto refused = client->submit_async("one too many", 10s, [](Result&&) { FAIL("called"); });
  REQUIRE(refused.has_value());
  CHECK(refused->code == ErrorCode::kOverloaded);
  CHECK(refused->message.find("in flight") != std::string::npos);
  Result sync = client->submit("also too many", 1s);
  REQUIRE_FALSE(sync.ok());
  CHECK(sync.error().code == ErrorCode::kOverloaded);

  gate->open();
  CHECK(test::eventually([&] { client->poll(); return answered.load() == 8; }, 10s));
  CHECK(correct.load() == 8);
  CHECK(client->submit("after", 5s).ok());  // slots came back
}

TEST_CASE("a client that breaks the protocol is dropped while others carry on") {
  test::InProcessDaemon daemon(small_config(0.5), std::make_unique<CpuBackend>(1, 1));
  auto good = test::connect(daemon.socket_path());
  REQUIRE(good->submit("before", 5s).ok());

  auto attached = attach_to_daemon(daemon.socket_path(), 2s);
  REQUIRE(attached);
  Attachment& raw = *attached;
  const std::uint64_t bytes = shm::file_bytes(raw.fds[shm::kRequestRegionFd].get()).value();
  auto region = shm::map_fd(raw.fds[shm::kRequestRegionFd].get(), bytes, true).value();
  auto* header = static_cast<shm::SegmentHeader*>(region.get_address());
  auto* tail = reinterpret_cast<shm::RingTail*>(static_cast<char*>(region.get_address()) + header->ring_offset);
  auto* entries = reinterpret_cast<shm::RingEntry*>(tail + 1);
  entries[0] = shm::make_ring_entry(1'000'000, 1);  // a slot far outside the segment
  tail->tail.store(1);
  const std::uint64_t one = 1;
  REQUIRE(::write(raw.fds[shm::kDoorbellFd].get(), &one, sizeof(one)) == sizeof(one));

  char buf[8];
  CHECK(test::eventually([&] { return ::recv(raw.connection.get(), buf, sizeof(buf), MSG_DONTWAIT) == 0; }, 5s));
  CHECK(daemon.stats().clients_dropped_for_violation.load() == 1);
  for (int i = 0; i < 50; ++i) {
    const std::string input = "after-" + std::to_string(i);
    Result r = good->submit(input, 5s);
    REQUIRE(r.ok());
    CHECK(r.output() == reference_batchstring(input, 1));
  }
}

TEST_CASE("a backend that returns the wrong number of results fails its batch clearly") {
  test::InProcessDaemon daemon(small_config(0.0), std::make_unique<ShortBackend>());
  auto client = test::connect(daemon.socket_path());
  Result r = client->submit("anything", 5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kBackendError);
  CHECK(r.error().message.find("0 results for 1 inputs") != std::string::npos);
  CHECK(client->submit("still served", 5s).error().code == ErrorCode::kBackendError);
}

TEST_CASE("stopping the daemon finishes the requests it holds") {
  DaemonConfig config = small_config(10'000.0);  // batches would wait 10 s
  test::InProcessDaemon daemon(config, std::make_unique<CpuBackend>(1, 1));
  auto client = test::connect(daemon.socket_path());
  std::atomic<int> ok{0}, answered{0};
  for (int i = 0; i < 20; ++i) {
    const std::string input = "held-" + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 30s, [&, input](Result&& r) {
      answered.fetch_add(1);
      if (r.ok() && r.output() == reference_batchstring(input, 1)) ok.fetch_add(1);
    }).has_value());
  }
  CHECK(test::eventually([&] { return daemon.stats().requests_taken.load() == 20; }, 5s));
  const auto start = std::chrono::steady_clock::now();
  daemon.stop();
  CHECK(std::chrono::steady_clock::now() - start < test::grace(5s));
  CHECK(test::eventually([&] { client->poll(); return answered.load() == 20; }, 5s));
  CHECK(ok.load() == 20);
  CHECK(test::eventually([&] { return !client->connected(); }, 5s));
  // With no daemon back, a new request waits for one until its own deadline, then says why.
  const auto submitted = std::chrono::steady_clock::now();
  Result after = client->submit("after stop", 300ms);
  const auto took = std::chrono::steady_clock::now() - submitted;
  REQUIRE_FALSE(after.ok());
  CHECK(after.error().code == ErrorCode::kDaemonUnavailable);
  CHECK(took >= 300ms);
  CHECK(took < 300ms + test::grace(700ms));
  CHECK_FALSE(client->connected());
}

TEST_CASE("a client scribbling over its own segment hurts only itself") {
  test::InProcessDaemon daemon(small_config(0.2), std::make_unique<CpuBackend>(1, 1));
  auto good = test::connect(daemon.socket_path());
  std::atomic<bool> stop{false};
  std::atomic<int> hostile_attaches{0};
  std::thread hostile([&] {
    std::mt19937_64 rng(42);
    while (!stop.load()) {
      auto attached = attach_to_daemon(daemon.socket_path(), 2s);
      if (!attached) continue;
      Attachment& raw = *attached;
      hostile_attaches.fetch_add(1);
      const std::uint64_t bytes = shm::file_bytes(raw.fds[shm::kRequestRegionFd].get()).value();
      auto region = shm::map_fd(raw.fds[shm::kRequestRegionFd].get(), bytes, true).value();
      auto* base = static_cast<unsigned char*>(region.get_address());
      char buf[8];
      // Random bytes anywhere in the request region (header, ring, slots), ringing the doorbell,
      // until the daemon gives up on this client.
      for (int round = 0; round < 2000 && !stop.load(); ++round) {
        for (int i = 0; i < 64; ++i) base[rng() % bytes] = static_cast<unsigned char>(rng());
        const std::uint64_t one = 1;
        (void)!::write(raw.fds[shm::kDoorbellFd].get(), &one, sizeof(one));
        if (::recv(raw.connection.get(), buf, sizeof(buf), MSG_DONTWAIT) == 0) break;
      }
    }
  });
  // The normal client carries on for 10 s (scaled) beside the scribbler.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(test::scaled(10'000, 2'000));
  std::uint64_t requests = 0, ok = 0;
  for (; std::chrono::steady_clock::now() < until; ++requests) {
    const std::string input = "good-" + std::to_string(requests);
    Result r = good->submit(input, 10s);
    if (r.ok() && r.output() == reference_batchstring(input, 1)) ++ok;
  }
  stop.store(true);
  hostile.join();
  CHECK(ok == requests);
  CHECK(hostile_attaches.load() >= 1);
  MESSAGE("normal client: ", ok, " of ", requests, " answered correctly; hostile attaches: ",
          hostile_attaches.load(), ", dropped for violations: ",
          daemon.stats().clients_dropped_for_violation.load());
}

TEST_CASE("a cancelled request that the daemon has not batched yet never runs") {
  auto backend = std::make_unique<GateBackend>();
  GateBackend* gate = backend.get();
  DaemonConfig config = small_config(0.0);
  config.batch.max_batch = 1;  // one request per batch: the gate holds the first, the rest wait
  test::InProcessDaemon daemon(config, std::move(backend));
  auto client = test::connect(daemon.socket_path());
  std::vector<std::uint64_t> ids(10);
  std::vector<std::string> results(10);
  std::atomic<int> answered{0};
  for (int i = 0; i < 10; ++i) {
    REQUIRE_FALSE(client->submit_async("req-" + std::to_string(i), 10s, [&, i](Result&& r) {
      results[static_cast<std::size_t>(i)] = r.ok() ? r.output() : error_code_name(r.error().code);
      answered.fetch_add(1);
    }, &ids[static_cast<std::size_t>(i)]).has_value());
  }
  // Batch objects: one running at the gate, two queued; the other seven wait for a batch.
  CHECK(test::eventually([&] { return daemon.stats().requests_taken.load() == 10; }, 5s));
  for (int i = 5; i < 10; ++i) client->cancel(ids[static_cast<std::size_t>(i)]);
  CHECK(test::eventually([&] { client->poll(); return answered.load() == 5; }, 5s));
  gate->open();
  CHECK(test::eventually([&] { client->poll(); return answered.load() == 10; }, 5s));
  for (int i = 0; i < 5; ++i) CHECK(results[static_cast<std::size_t>(i)] == "req-" + std::to_string(i));
  for (int i = 5; i < 10; ++i) CHECK(results[static_cast<std::size_t>(i)] == "cancelled");
  // Those still waiting in the daemon when withdrawn never reached the backend.
  std::this_thread::sleep_for(100ms);
  const auto ran = gate->ran();
  CHECK(ran.size() == 5);
  for (const auto& input : ran) CHECK(input.substr(4) < "5");
}

namespace {

// An async request's callbacks: how many came, and what the last one said.
struct Outcome {
  std::atomic<int> calls{0};
  std::string result;  // the output, or the error's name; written by poll()'s thread

  Client::Callback callback() {
    return [this](Result&& r) {
      result = r.ok() ? r.output() : error_code_name(r.error().code);
      calls.fetch_add(1);
    };
  }
};

}  // namespace

TEST_CASE("cancelling a request the backend is running: one callback, cancelled; its slot waits for the daemon") {
  auto backend = std::make_unique<GateBackend>();
  GateBackend* gate = backend.get();
  DaemonConfig config = small_config(0.0);
  config.segment.slot_count = 2;
  config.batch.max_batch = 1;
  test::InProcessDaemon daemon(config, std::move(backend));
  auto client = test::connect(daemon.socket_path());
  Outcome running, other;
  std::uint64_t running_id = 0;
  REQUIRE_FALSE(client->submit_async("running", 10s, running.callback(), &running_id).has_value());
  REQUIRE(test::eventually([&] { return gate->entered() == 1; }, 5s));  // the backend holds it
  REQUIRE_FALSE(client->submit_async("other", 10s, other.callback()).has_value());
  REQUIRE(test::eventually([&] { return daemon.stats().requests_taken.load() == 2; }, 5s));

  client->cancel(running_id);
  CHECK(test::eventually([&] { client->poll(); return running.calls.load() == 1; }, 5s));
  CHECK(running.result == "cancelled");
  CHECK(other.calls.load() == 0);
  // The daemon still runs it and will write its answer into its slot: until then the slot is not
  // handed out again, so with the other slot busy too there is no room.
  Outcome refused;
  const auto no_room = client->submit_async("no room", 10s, refused.callback());
  REQUIRE(no_room.has_value());
  CHECK(no_room->code == ErrorCode::kOverloaded);
  // Cancelling it again, or an id never given out, does nothing.
  client->cancel(running_id);
  client->cancel(running_id + 1000);
  CHECK(client->poll() == 0);
  CHECK(running.calls.load() == 1);

  gate->open();
  CHECK(test::eventually([&] { client->poll(); return other.calls.load() == 1; }, 5s));
  CHECK(other.result == "other");
  // The cancelled request's answer came too, and reaches no callback.
  CHECK(test::eventually([&] { return daemon.stats().requests_ok.load() == 2; }, 5s));
  client->poll();
  CHECK(running.calls.load() == 1);
  CHECK(running.result == "cancelled");
  CHECK(refused.calls.load() == 0);
  const auto ran = gate->ran();
  CHECK(std::find(ran.begin(), ran.end(), "running") != ran.end());  // a running batch is not stopped

  // Both slots are free again: two requests in flight at once are admitted and answered.
  Outcome first, second;
  REQUIRE_FALSE(client->submit_async("first", 10s, first.callback()).has_value());
  REQUIRE_FALSE(client->submit_async("second", 10s, second.callback()).has_value());
  CHECK(test::eventually([&] { client->poll(); return first.calls.load() + second.calls.load() == 2; }, 5s));
  CHECK(first.result == "first");
  CHECK(second.result == "second");
  CHECK(first.calls.load() == 1);
  CHECK(second.calls.load() == 1);
}

TEST_CASE("cancelling a request already answered is ignored, whether or not its callback has come") {
  test::InProcessDaemon daemon(small_config(0.0), std::make_unique<CpuBackend>(1, 1));
  auto client = test::connect(daemon.socket_path());
  const std::string expected = reference_batchstring("answered", 1);

  // Its callback has come: the id is finished.
  Outcome delivered;
  std::uint64_t delivered_id = 0;
  REQUIRE_FALSE(client->submit_async("answered", 10s, delivered.callback(), &delivered_id).has_value());
  CHECK(test::eventually([&] { client->poll(); return delivered.calls.load() == 1; }, 5s));
  client->cancel(delivered_id);
  CHECK(client->poll() == 0);
  CHECK(delivered.calls.load() == 1);
  CHECK(delivered.result == expected);

  // Answered by the daemon, its callback not yet called: the next poll() brings the answer.
  Outcome pending;
  std::uint64_t pending_id = 0;
  REQUIRE_FALSE(client->submit_async("answered", 10s, pending.callback(), &pending_id).has_value());
  CHECK(test::eventually([&] { return daemon.stats().requests_ok.load() == 2; }, 5s));
  client->cancel(pending_id);
  CHECK(test::eventually([&] { client->poll(); return pending.calls.load() == 1; }, 5s));
  CHECK(pending.result == expected);
  client->poll();
  CHECK(pending.calls.load() == 1);

  // Other requests on the client are unaffected.
  Result after = client->submit("after", 5s);
  REQUIRE(after.ok());
  CHECK(after.output() == reference_batchstring("after", 1));
}

// FanOut (client_lib/fan_out.hpp), what both Open Inference Protocol front-ends send a tensor
// through: N strings as one submission, answered once in order, the first failure withdrawing the
// rest. Against a real daemon, with a polling thread as batchd-grpc has, and submitters and
// cancellers on other threads at once, which is what TSan is here to watch.
#include <doctest/doctest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <random>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "client_lib/fan_out.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// Polls the client on its own thread, as batchd-grpc's DaemonPool does.
class Poller {
 public:
  explicit Poller(Client& client) : client_(client), thread_([this] { run(); }) {}
  ~Poller() {
    stop_.store(true);
    thread_.join();
  }

 private:
  void run() {
    pollfd fd{client_.event_fd(), POLLIN, 0};
    while (!stop_.load()) {
      ::poll(&fd, 1, 5);
      client_.poll();
    }
  }
  Client& client_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<std::string> numbered(const std::string& prefix, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

std::vector<std::string_view> views(const std::vector<std::string>& strings) {
  return {strings.begin(), strings.end()};
}

}  // namespace

TEST_CASE("a fan-out of 1,000 strings is answered once, in order; none is an empty one's answer") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto client = test::connect(socket);
  Poller poller(*client);
  const std::vector<std::string> inputs = numbered("fan-", 1000);
  std::atomic<int> calls{0};
  std::promise<FanOut::Outcome> answered;
  FanOut::start(*client, views(inputs), 20s, Priority::kNormal, [&](FanOut::Outcome&& outcome) {
    calls.fetch_add(1);
    answered.set_value(std::move(outcome));
  });
  FanOut::Outcome outcome = answered.get_future().get();
  REQUIRE_FALSE(outcome.error);
  REQUIRE(outcome.results.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) CHECK(outcome.results[i].output() == reference_batchstring(inputs[i], 1));
  std::this_thread::sleep_for(50ms);
  CHECK(calls.load() == 1);

  bool empty_done = false;
  FanOut::start(*client, {}, 1s, Priority::kNormal, [&](FanOut::Outcome&& none) {
    empty_done = !none.error && none.results.empty();
  });
  CHECK(empty_done);  // before start returns
}

TEST_CASE("a string refused at once fails the fan-out before start returns, and none of it was sent") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1", "--max-input-bytes", "64"});
  auto client = test::connect(socket);
  Poller poller(*client);
  std::vector<std::string> inputs = numbered("ok-", 8);
  inputs[5] = std::string(100, 'x');  // over --max-input-bytes
  std::optional<Error> error;
  FanOut::start(*client, views(inputs), 5s, Priority::kNormal, [&](FanOut::Outcome&& outcome) {
    error = outcome.error;
  });
  REQUIRE(error);
  CHECK(error->code == ErrorCode::kTooLarge);
  // No slot was taken, so a whole client's worth is admitted at once, not after a poll.
  const std::vector<std::string> full = numbered("full-", client->slot_count());
  std::promise<FanOut::Outcome> answered;
  bool refused = false;
  FanOut::start(*client, views(full), 20s, Priority::kNormal, [&](FanOut::Outcome&& outcome) {
    if (outcome.error && outcome.error->code == ErrorCode::kOverloaded) {
      refused = true;
      return;
    }
    answered.set_value(std::move(outcome));
  });
  REQUIRE_FALSE(refused);
  const FanOut::Outcome outcome = answered.get_future().get();
  REQUIRE_FALSE(outcome.error);
  CHECK(outcome.results.size() == full.size());
  // The daemon took the full fan-out's requests and nothing of the refused one.
  CHECK(test::eventually([&] { return client->daemon_status().requests_taken == full.size(); }, 2s));
  std::this_thread::sleep_for(100ms);  // two status publications
  CHECK(client->daemon_status().requests_taken == full.size());
}

TEST_CASE("submit_all_async admits all or none: too few free slots or one bad input sends nothing") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1", "--max-input-bytes", "64",
                                      "--slots-per-client", "16"});
  auto client = test::connect(socket);
  REQUIRE(client->slot_count() == 16);
  int held_answers = 0, all_answers = 0;
  // Answered or not, a request holds its slot until poll() hands its answer over.
  for (int i = 0; i < 3; ++i) {
    REQUIRE_FALSE(client->submit_async("held", 10s, [&](Result&& result) { held_answers += result.ok(); }));
  }
  const auto make = [&](const std::vector<std::string>& inputs) {
    std::vector<Client::AsyncSubmission> submissions(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      submissions[i].input = inputs[i];
      submissions[i].done = [&](Result&& result) { all_answers += result.ok() ? 1 : 1000; };
    }
    return submissions;
  };
  const auto poll_for = [&](std::chrono::milliseconds period) {
    const auto end = std::chrono::steady_clock::now() + period;
    while (std::chrono::steady_clock::now() < end) {
      client->poll();
      std::this_thread::sleep_for(2ms);
    }
  };

  const std::vector<std::string> fourteen = numbered("one-too-many-", 14);
  std::vector<Client::AsyncSubmission> too_many = make(fourteen);
  CHECK_FALSE(client->submit_all_async(too_many, 10s));
  for (const Client::AsyncSubmission& s : too_many) {
    REQUIRE(s.refused);
    CHECK(s.refused->code == ErrorCode::kOverloaded);
    CHECK(s.refused->message == too_many.front().refused->message);
    CHECK(s.done);  // still the caller's: never handed to the client
  }
  // Exactly as many as are free fit.
  const std::vector<std::string> thirteen = numbered("fits-", 13);
  std::vector<Client::AsyncSubmission> fitting = make(thirteen);
  CHECK(client->submit_all_async(fitting, 10s));
  for (const Client::AsyncSubmission& s : fitting) CHECK_FALSE(s.refused);
  REQUIRE(test::eventually([&] { client->poll(); return held_answers == 3 && all_answers == 13; }, 10s));

  const std::vector<std::string> mixed = {"fine", std::string(100, 'x'), "also fine", "\xff\xfe"};
  std::vector<Client::AsyncSubmission> bad = make(mixed);
  CHECK_FALSE(client->submit_all_async(bad, 10s));
  REQUIRE(bad[1].refused);
  CHECK(bad[1].refused->code == ErrorCode::kTooLarge);
  for (const std::size_t i : {0, 2}) {
    REQUIRE(bad[i].refused);
    CHECK(bad[i].refused->code == ErrorCode::kTooLarge);
    CHECK(bad[i].refused->message == bad[1].refused->message);
  }
  REQUIRE(bad[3].refused);
  CHECK(bad[3].refused->code == ErrorCode::kInvalidUtf8);  // its own reason
  poll_for(100ms);
  CHECK(all_answers == 13);  // no callback of a refused submission ever came

  // Every slot is free again, and the daemon saw only what was admitted.
  const std::vector<std::string> sixteen = numbered("all-", 16);
  std::vector<Client::AsyncSubmission> whole = make(sixteen);
  CHECK(client->submit_all_async(whole, 10s));
  REQUIRE(test::eventually([&] { client->poll(); return all_answers == 13 + 16; }, 10s));
  CHECK(test::eventually([&] { return client->daemon_status().requests_taken == 3 + 13 + 16; }, 2s));
}

TEST_CASE("cancel of many ids at once: every callback comes with kCancelled at the next poll") {
  const std::string socket = test::temp_socket_path();
  // Each batch takes 2 s: nothing finishes by itself while the test looks.
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-fixed-us", "2000000", "--max-wait-ms", "1"});
  auto client = test::connect(socket);
  pollfd fd{client->event_fd(), POLLIN, 0};
  const std::vector<std::string> inputs = numbered("slow-", 500);
  std::vector<ErrorCode> codes;
  std::size_t successes = 0;
  std::vector<Client::AsyncSubmission> submissions(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    submissions[i].input = inputs[i];
    submissions[i].done = [&](Result&& result) {
      if (result.ok()) {
        ++successes;
      } else {
        codes.push_back(result.error().code);
      }
    };
  }
  REQUIRE(client->submit_all_async(submissions, 30s));
  std::this_thread::sleep_for(50ms);  // the daemon takes the first batch and runs it
  CHECK(client->poll() == 0);
  // Out of order, with a duplicate and an unknown id: the client sorts them itself.
  std::vector<std::uint64_t> ids;
  for (auto s = submissions.rbegin(); s != submissions.rend(); ++s) ids.push_back(s->id);
  ids.push_back(submissions.front().id);
  ids.push_back(submissions.back().id + 1000);
  const auto started = std::chrono::steady_clock::now();
  client->cancel(ids);
  // One wait on the event fd, long enough that only the cancel's own wake-up ends it soon.
  const auto deadline = started + test::grace(1500ms);
  while (codes.size() + successes < inputs.size() && std::chrono::steady_clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    ::poll(&fd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
    client->poll();
  }
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(successes == 0);
  REQUIRE(codes.size() == inputs.size());
  CHECK(std::count(codes.begin(), codes.end(), ErrorCode::kCancelled) == static_cast<long>(inputs.size()));
  CHECK(took < test::grace(500ms));
  MESSAGE("all " << inputs.size() << " callbacks " << std::chrono::duration<double, std::milli>(took).count()
                 << " ms after one cancel");
}

TEST_CASE("submitters and cancellers on many threads: each fan-out answered exactly once, right, cancelled or refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto client = test::connect(socket);
  Poller poller(*client);
  constexpr int kThreads = 4;
  const int per_thread = 100 * test::scale() < 20 ? 20 : static_cast<int>(100 * test::scale());
  std::atomic<int> done{0}, wrong{0}, twice{0}, cancelled{0}, refused{0}, ok{0};
  std::vector<std::weak_ptr<FanOut>> all[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int k = 0; k < per_thread; ++k) {
        auto inputs = std::make_shared<std::vector<std::string>>(numbered(std::to_string(t) + "." + std::to_string(k) + ".", 1 + rng() % 16));
        auto seen = std::make_shared<std::atomic<int>>(0);
        std::shared_ptr<FanOut> fan = FanOut::start(
            *client, views(*inputs), 20s, Priority::kNormal, [&, inputs, seen](FanOut::Outcome&& outcome) {
              if (seen->fetch_add(1) != 0) twice.fetch_add(1);
              if (outcome.error) {
                // Refused at once (the client's slots all taken by the others) is an answer too.
                const ErrorCode code = outcome.error->code;
                (code == ErrorCode::kCancelled ? cancelled : code == ErrorCode::kOverloaded ? refused : wrong).fetch_add(1);
              } else {
                bool right = outcome.results.size() == inputs->size();
                for (std::size_t i = 0; right && i < inputs->size(); ++i) {
                  right = outcome.results[i].output() == reference_batchstring((*inputs)[i], 1);
                }
                (right ? ok : wrong).fetch_add(1);
              }
              done.fetch_add(1);
            });
        if (rng() % 2 == 0) fan->cancel();  // from the submitting thread, racing the answers
        all[t].push_back(fan);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(test::eventually([&] { return done.load() == kThreads * per_thread; }, 30s));
  CHECK(twice.load() == 0);
  CHECK(wrong.load() == 0);
  CHECK(ok.load() + cancelled.load() + refused.load() == kThreads * per_thread);
  CHECK(ok.load() > 0);
  // Every FanOut is freed once its last callback has come.
  CHECK(test::eventually(
      [&] {
        for (auto& list : all) {
          for (auto& weak : list) {
            if (!weak.expired()) return false;
          }
        }
        return true;
      },
      5s));
}

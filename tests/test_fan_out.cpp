// FanOut (client_lib/fan_out.hpp), what both Open Inference Protocol front-ends send a tensor
// through: N strings as one submission, answered once in order, the first failure withdrawing the
// rest. Against a real daemon, with a polling thread as batchd-grpc has, and submitters and
// cancellers on other threads at once, which is what TSan is here to watch.
#include <doctest/doctest.h>
#include <poll.h>

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

TEST_CASE("a string refused at once fails the fan-out before start returns and frees every slot") {
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
  // The seven admitted were withdrawn: their slots come back (at the poller's next pass), so a
  // whole client's worth fits again.
  const std::vector<std::string> full = numbered("full-", client->slot_count());
  std::promise<FanOut::Outcome> answered;
  bool admitted = test::eventually(
      [&] {
        bool refused = false;
        FanOut::start(*client, views(full), 20s, Priority::kNormal, [&](FanOut::Outcome&& outcome) {
          if (outcome.error && outcome.error->code == ErrorCode::kOverloaded) {
            refused = true;  // called before start returns: try again
            return;
          }
          answered.set_value(std::move(outcome));
        });
        return !refused;
      },
      5s);
  REQUIRE(admitted);
  const FanOut::Outcome outcome = answered.get_future().get();
  REQUIRE_FALSE(outcome.error);
  CHECK(outcome.results.size() == full.size());
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

// Priority classes end to end over shared memory, against the batchd binary: each way the C++ API
// submits (submit, submit_many, submit_async, submit_many_async) carries its class into the
// daemon, whose per-class counters say so, and a re-attached client keeps each pending request's
// class when it moves it to a new daemon. (The C ABI's: test_c_api.cpp.)
#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "client_lib/client.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr Priority kClasses[] = {Priority::kHigh, Priority::kNormal, Priority::kLow};

std::size_t index_of(Priority priority) { return static_cast<std::size_t>(priority); }

// Counts the answers of asynchronous requests, each checked against the reference.
struct AsyncAnswers {
  std::atomic<int> done{0}, right{0};
  Client::Callback expect(const std::string& input) {
    return [this, input](Result&& r) {
      if (r.ok() && r.output() == reference_batchstring(input, 1)) right.fetch_add(1);
      done.fetch_add(1);
    };
  }
};

// A different number of requests per class (high 1, normal 2, low 3 times `base`), so a class
// that arrives as another shows up in the counts.
int count_for(Priority priority, int base) { return base * (static_cast<int>(index_of(priority)) + 1); }

}  // namespace

TEST_CASE("names and parsing of the classes") {
  CHECK(priority_name(Priority::kHigh) == "high");
  CHECK(priority_name(Priority::kNormal) == "normal");
  CHECK(priority_name(Priority::kLow) == "low");
  for (const Priority p : kClasses) CHECK(parse_priority(priority_name(p)) == p);
  for (const char* bad : {"", "HIGH", "High", " high", "urgent", "normal\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_priority(bad).has_value());
  }
}

TEST_CASE("every C++ submission path carries its class to the daemon, and answers stay right") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto client = test::connect(path);
  test::ClassCounts expected{};

  {
    // submit: without a class (normal), and in each class.
    Result plain = client->submit("plain", 10s);
    REQUIRE(plain.ok());
    CHECK(plain.output() == reference_batchstring("plain", 1));
    ++expected[index_of(Priority::kNormal)];
    for (const Priority p : kClasses) {
      for (int i = 0; i < count_for(p, 1); ++i) {
        const std::string input = "submit-" + std::string(priority_name(p)) + "-" + std::to_string(i);
        Result r = client->submit(input, 10s, p);
        REQUIRE(r.ok());
        CHECK(r.output() == reference_batchstring(input, 1));
        ++expected[index_of(p)];
      }
    }
    CHECK(test::taken_by_class(*client, expected) == expected);
  }

  {
    // submit_many: one class for the lot.
    for (const Priority p : kClasses) {
      std::vector<std::string> inputs;
      for (int i = 0; i < count_for(p, 4); ++i) {
        inputs.push_back("many-" + std::string(priority_name(p)) + "-" + std::to_string(i));
      }
      const std::vector<std::string_view> views(inputs.begin(), inputs.end());
      const std::vector<Result> results = client->submit_many(views, 10s, p);
      REQUIRE(results.size() == inputs.size());
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        REQUIRE(results[i].ok());
        CHECK(results[i].output() == reference_batchstring(inputs[i], 1));
      }
      expected[index_of(p)] += inputs.size();
    }
    CHECK(test::taken_by_class(*client, expected) == expected);
  }

  {
    // submit_async: the overload without a class (normal), and with one.
    AsyncAnswers answers;
    int sent = 0;
    REQUIRE_FALSE(client->submit_async("async-plain", 10s, answers.expect("async-plain")).has_value());
    ++expected[index_of(Priority::kNormal)];
    ++sent;
    for (const Priority p : kClasses) {
      for (int i = 0; i < count_for(p, 2); ++i) {
        const std::string input = "async-" + std::string(priority_name(p)) + "-" + std::to_string(i);
        std::uint64_t id = 0;
        REQUIRE_FALSE(client->submit_async(input, 10s, p, answers.expect(input), &id).has_value());
        CHECK(id != 0);
        ++expected[index_of(p)];
        ++sent;
      }
    }
    CHECK(test::eventually([&] { client->poll(); return answers.done.load() == sent; }, 10s));
    CHECK(answers.right.load() == sent);
    CHECK(test::taken_by_class(*client, expected) == expected);
  }

  {
    // submit_many_async: a class per submission, mixed within one publication; a default-made
    // submission is normal.
    AsyncAnswers answers;
    std::vector<std::string> inputs;
    std::vector<Client::AsyncSubmission> submissions;
    for (int i = 0; i < 30; ++i) inputs.push_back("many-async-" + std::to_string(i));
    for (int i = 0; i < 30; ++i) {
      Client::AsyncSubmission s;
      s.input = inputs[static_cast<std::size_t>(i)];
      s.done = answers.expect(inputs[static_cast<std::size_t>(i)]);
      if (i % 5 != 4) s.priority = kClasses[static_cast<std::size_t>(i) % 3];
      ++expected[index_of(s.priority)];
      submissions.push_back(std::move(s));
    }
    REQUIRE(client->submit_many_async(submissions, 10s) == submissions.size());
    CHECK(test::eventually([&] { client->poll(); return answers.done.load() == 30; }, 10s));
    CHECK(answers.right.load() == 30);
    CHECK(test::taken_by_class(*client, expected) == expected);
  }

  // The page is published periodically and a request counts as answered just after its caller
  // sees the answer: wait for a publication that has seen every answer.
  const std::uint64_t total = expected[0] + expected[1] + expected[2];
  DaemonStatus status;
  CHECK(test::eventually([&] { return (status = client->daemon_status()).requests_ok == total; }, 5s));
  CHECK(status.requests_taken == total);
  CHECK(status.requests_failed == 0);
}

TEST_CASE("a re-attached client moves each pending request to the new daemon in its own class") {
  const std::string path = test::temp_socket_path();
  // A long batch window and room for all: everything stays in the first daemon's hands.
  auto daemon = std::make_unique<test::DaemonProcess>(
      path, std::vector<std::string>{"--backend", "cpu", "--policy", "fixed", "--max-wait-ms", "5000",
                                     "--max-batch", "1024"});
  auto client = test::connect(path);
  test::ClassCounts expected{};
  AsyncAnswers answers;
  int async_sent = 0;
  for (const Priority p : kClasses) {
    for (int i = 0; i < count_for(p, 3); ++i) {
      const std::string input = "held-" + std::string(priority_name(p)) + "-" + std::to_string(i);
      REQUIRE_FALSE(client->submit_async(input, 20s, p, answers.expect(input)).has_value());
      ++expected[index_of(p)];
      ++async_sent;
    }
  }
  // Synchronous callers are moved too: two high, one low.
  std::atomic<int> sync_right{0};
  std::vector<std::thread> callers;
  for (const Priority p : {Priority::kHigh, Priority::kHigh, Priority::kLow}) {
    ++expected[index_of(p)];
    const std::string input = "sync-" + std::string(priority_name(p)) + "-" + std::to_string(callers.size());
    callers.emplace_back([&, p, input] {
      Result r = client->submit(input, 20s, p);
      if (r.ok() && r.output() == reference_batchstring(input, 1)) sync_right.fetch_add(1);
    });
  }
  // The first daemon took all of them, each in its class, and answered none.
  CHECK(test::taken_by_class(*client, expected) == expected);
  CHECK(client->daemon_status().requests_ok == 0);
  daemon->kill9();
  CHECK(test::eventually([&] { return !client->connected(); }, 2s));
  daemon = std::make_unique<test::DaemonProcess>(path, std::vector<std::string>{"--backend", "cpu", "--max-wait-ms", "1"});
  CHECK(test::eventually([&] { client->poll(); return answers.done.load() == async_sent; }, 20s));
  for (auto& c : callers) c.join();
  CHECK(answers.right.load() == async_sent);
  CHECK(sync_right.load() == 3);
  // The new daemon took every one again, in the same classes.
  CHECK(test::taken_by_class(*client, expected) == expected);
}

// Asynchronous jobs kept in Redis (--jobs-redis), end to end: two nodes (each a batchd daemon and
// a batchd-http) share a redis-server this test starts on a free loopback port. Jobs submitted
// through node A are polled through node B and every answer is checked; Redis stopped mid-run
// gives typed 503s and no crash, and the nodes recover by themselves when it is back; a Redis that
// hangs costs a caller a bounded wait.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "tests/http/jobs_test_support.hpp"
#include "tests/http/redis_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

// A node: its own cpu daemon and its own front-end, keeping jobs in the shared Redis.
struct Node {
  explicit Node(const std::string& redis_url)
      : socket(temp_socket_path()), daemon(socket, {"--max-wait-ms", "1"}),
        frontend(socket, {"--workers", "2", "--timeout-ms", "5000", "--jobs-redis", redis_url}) {}
  std::string socket;
  DaemonProcess daemon;
  FrontendProcess frontend;
};

std::string input_for(std::size_t i) { return "redis job " + std::to_string(i); }

// Counts outcomes from several threads; the first surprise is kept for the failure message.
struct Tally {
  std::atomic<std::uint64_t> ok{0}, wrong{0}, unavailable{0}, lost{0}, other{0}, transport{0};
  std::mutex mu;
  std::string first_surprise;
  void surprise(std::atomic<std::uint64_t>& counter, const std::string& what) {
    counter.fetch_add(1);
    std::lock_guard lock(mu);
    if (first_surprise.empty()) first_surprise = what;
  }
};

bool is_unavailable(const HttpResponse& r) {
  return r.status == 503 && error_code_of(r.body) == "jobs_store_unavailable" && r.header("retry-after") == "1";
}

}  // namespace

TEST_CASE("10,000 jobs submitted through node A, polled through node B, every answer checked") {
  RedisServer redis;
  Node a(redis.url());
  Node b(redis.url());
  const std::size_t total = scaled(10000, 200);
  constexpr unsigned kThreads = 8;
  std::vector<std::string> ids(total);
  Tally tally;

  const auto submit_start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(a.frontend.port());
      for (std::size_t i = t; i < total; i += kThreads) {
        auto r = client.round_trip(job_request(input_for(i)));
        if (!r) return tally.surprise(tally.transport, "submit: no answer");
        if (r->status != 202) return tally.surprise(tally.other, "submit: " + std::to_string(r->status) + " " + r->body);
        ids[i] = parse_job(r->body).id;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double submit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - submit_start).count();
  REQUIRE_MESSAGE(tally.transport + tally.other == 0, tally.first_surprise);

  std::atomic<std::uint64_t> polls{0};
  const auto poll_start = std::chrono::steady_clock::now();
  threads.clear();
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(b.frontend.port());
      for (std::size_t i = t; i < total; i += kThreads) {
        const auto until = std::chrono::steady_clock::now() + grace(5000ms);
        for (;;) {
          auto r = client.round_trip(poll_request(ids[i]));
          polls.fetch_add(1);
          if (!r) return tally.surprise(tally.transport, "poll: no answer");
          const JobView job = parse_job(r->body);
          if (r->status == 200 && job.status == "pending" && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(1ms);
            continue;
          }
          if (r->status == 200 && job.status == "done" && job.id == ids[i] &&
              job.output == reference_batchstring(input_for(i), 1)) {
            tally.ok.fetch_add(1);
          } else {
            tally.surprise(tally.wrong, "poll " + ids[i] + ": " + std::to_string(r->status) + " " + r->body);
          }
          break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double poll_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - poll_start).count();
  CHECK_MESSAGE(tally.ok == total, tally.first_surprise);
  CHECK(tally.wrong == 0);
  CHECK(tally.transport == 0);
  MESSAGE(total << " jobs: submitted through A at " << static_cast<int>(total / submit_s) << "/s, " << polls.load()
                << " polls through B at " << static_cast<int>(polls / poll_s) << "/s (" << kThreads
                << " keep-alive connections each)");
}

TEST_CASE("Redis stopped mid-run: typed 503s, no crash, recovery when it returns; a hung Redis costs a bounded wait") {
  RedisServer redis;
  Node a(redis.url());
  Node b(redis.url());
  Tally tally;
  std::atomic<bool> stop{false};
  std::atomic<bool> restarted{false};
  std::atomic<std::uint64_t> ok_after_restart{0};
  std::atomic<std::size_t> next{0};

  // Each caller submits through A and polls through B, over and over. Acceptable: a right answer,
  // 503 jobs_store_unavailable with Retry-After, or 404 for a job whose record Redis lost with
  // its restart (it keeps nothing on disk). Anything else, or no answer at all, is a failure.
  auto caller = [&] {
    HttpClient submit(a.frontend.port());
    HttpClient poll(b.frontend.port());
    while (!stop.load()) {
      const std::size_t i = next.fetch_add(1);
      const bool after_restart = restarted.load();
      auto r = submit.round_trip(job_request(input_for(i)));
      if (!r) return tally.surprise(tally.transport, "submit: no answer");
      if (is_unavailable(*r)) {
        tally.unavailable.fetch_add(1);
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (r->status != 202) return tally.surprise(tally.other, "submit: " + std::to_string(r->status) + " " + r->body);
      const std::string id = parse_job(r->body).id;
      for (;;) {
        auto p = poll.round_trip(poll_request(id));
        if (!p) return tally.surprise(tally.transport, "poll: no answer");
        const JobView job = parse_job(p->body);
        if (p->status == 200 && job.status == "pending") {
          std::this_thread::sleep_for(2ms);
          continue;
        }
        if (is_unavailable(*p)) {
          tally.unavailable.fetch_add(1);
          std::this_thread::sleep_for(5ms);
          if (stop.load()) break;
          continue;
        }
        if (p->status == 404 && error_code_of(p->body) == "job_not_found" && !after_restart) {
          tally.lost.fetch_add(1);
        } else if (p->status == 200 && job.status == "done" && job.output == reference_batchstring(input_for(i), 1)) {
          tally.ok.fetch_add(1);
          if (after_restart) ok_after_restart.fetch_add(1);
        } else {
          tally.surprise(tally.wrong, "poll " + id + ": " + std::to_string(p->status) + " " + p->body);
        }
        break;
      }
    }
  };
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) callers.emplace_back(caller);

  REQUIRE(eventually([&] { return tally.ok.load() >= 50; }, grace(10000ms)));
  redis.stop();
  const std::uint64_t unavailable_before = tally.unavailable.load();
  REQUIRE(eventually([&] { return tally.unavailable.load() >= unavailable_before + 20; }, grace(5000ms)));
  {
    // Meanwhile the synchronous API and readiness do not depend on Redis.
    HttpClient client(a.frontend.port());
    auto sync = client.round_trip(batch_request("sync during the outage"));
    REQUIRE(sync.has_value());
    CHECK(sync->body == expected_json_output("sync during the outage"));
    auto ready = client.round_trip(make_request("GET", "/readyz"));
    REQUIRE(ready.has_value());
    CHECK(ready->status == 200);
  }
  std::this_thread::sleep_for(500ms);
  redis.start();
  restarted.store(true);
  CHECK_MESSAGE(eventually([&] { return ok_after_restart.load() >= 20; }, grace(10000ms)), tally.first_surprise);
  stop.store(true);
  for (auto& t : callers) t.join();
  CHECK_MESSAGE(tally.wrong + tally.other + tally.transport == 0, tally.first_surprise);
  CHECK(tally.unavailable > 0);
  MESSAGE("outage run: " << tally.ok.load() << " right answers, " << tally.unavailable.load() << " typed 503s, "
                         << tally.lost.load() << " jobs lost with Redis's data, " << ok_after_restart.load()
                         << " right after the restart");

  // A Redis that hangs (SIGSTOP) answers nothing: each call waits at most the 1 s command timeout.
  redis.pause();
  {
    HttpClient client(a.frontend.port());
    const auto started = std::chrono::steady_clock::now();
    auto r = client.round_trip(job_request("while Redis hangs"));
    const auto waited = std::chrono::steady_clock::now() - started;
    REQUIRE(r.has_value());
    CHECK(is_unavailable(*r));
    CHECK(waited < 1000ms + grace(1000ms));
  }
  redis.resume();
  HttpClient client(a.frontend.port());
  bool accepted = false;
  CHECK(eventually(
      [&] {
        auto r = client.round_trip(job_request("after the hang"));
        accepted = r && r->status == 202;
        return accepted;
      },
      grace(10000ms)));
  const std::string metrics = client.round_trip(make_request("GET", "/metrics"))->body;
  CHECK(metrics.find("batchd_http_jobs_store_errors_total 0\n") == std::string::npos);
}

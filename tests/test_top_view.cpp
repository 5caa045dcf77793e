// batchctl top's frame from two status snapshots: rates over the interval, errors by kind, the
// interval's batch sizes, one row per device.
#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "tools/top_view.hpp"

using namespace batchd;

namespace {

std::string joined(const std::vector<top::Line>& lines) {
  std::string out;
  for (const auto& line : lines) out += line.text + '\n';
  return out;
}

DaemonStatus status(std::uint64_t ok, std::uint64_t failed, std::uint64_t rejected, std::uint64_t batches) {
  DaemonStatus s;
  s.backend = "sim";
  s.daemon_pid = 42;
  s.policy = "adaptive";
  s.requests_ok = ok;
  s.requests_failed = failed;
  s.requests_rejected = rejected;
  s.batches = batches;
  s.batch_sizes.assign(8, 0);
  s.devices.resize(2);
  s.devices[0].state = "healthy";
  s.devices[1].state = "unhealthy";
  return s;
}

bool shows(const std::string& text, const char* pattern) {
  return std::regex_search(text, std::regex(pattern, std::regex::multiline));
}

}  // namespace

TEST_CASE("rates are over the interval, not since the daemon started") {
  DaemonStatus before = status(1'000'000, 500, 100, 10'000);
  DaemonStatus now = status(1'002'000, 530, 110, 10'500);
  before.batch_sizes[3] = 7'000;   // batches of 8..15 before the interval
  now.batch_sizes[3] = 7'400;      // 400 of them in it
  now.batch_sizes[0] = 100;        // and 100 lone requests
  now.devices[0].batches_ok = 900;
  before.devices[0].batches_ok = 400;
  const std::string text = joined(top::frame(before, now, 2.0, 120));
  INFO(text);
  CHECK(text.find("1000 answered ok, 15 failed") != std::string::npos);
  // 10 of the 30 failures were refused before running (5/s); the other 20 failed on a device.
  CHECK(text.find("errors/s: 5 refused before running") != std::string::npos);
  CHECK(text.find("10 failed on a device") != std::string::npos);
  CHECK(text.find("batches: 250/s") != std::string::npos);
  CHECK(shows(text, R"(^ +8\.\.15 +400 #+$)"));
  CHECK(shows(text, R"(^ +1\.\.1 +100 #+$)"));
  CHECK(!shows(text, R"(^ +2\.\.3 )"));  // no batches of that size in the interval
  CHECK(shows(text, R"(^0 +healthy +250 +100% +0 +- +- )"));  // every batch of the interval: a share of 100 %
  CHECK(shows(text, R"(^1 +unhealthy +0 )"));
  CHECK(text.find("not fitted yet") != std::string::npos);
}

TEST_CASE("a restarted daemon's counters start again rather than going negative") {
  const DaemonStatus before = status(5'000, 0, 0, 1'000);
  DaemonStatus now = status(300, 0, 0, 60);
  now.daemon_pid = 43;
  const std::string text = joined(top::frame(before, now, 1.0, 120));
  INFO(text);
  CHECK(text.find("300 answered ok") != std::string::npos);
  CHECK(text.find("batches: 60/s") != std::string::npos);
}

TEST_CASE("no line is wider than the screen") {
  const DaemonStatus s = status(0, 0, 0, 0);
  for (const auto& line : top::frame(s, s, 1.0, 30)) CHECK(line.text.size() <= 30);
  CHECK(joined(top::frame(s, s, 1.0, 200)).find("(no batches this interval)") != std::string::npos);
}

TEST_CASE("p50 and p99 are the interval's, read as histogram_quantile() reads them") {
  DaemonStatus before = status(0, 0, 0, 0);
  before.latency_bounds_ns = {1'000'000, 2'000'000, 4'000'000};  // buckets (0,1], (1,2], (2,4] ms, +Inf
  DaemonStatus now = before;
  auto& normal_before = before.queue_time_by_class[static_cast<std::size_t>(Priority::kNormal)];
  auto& normal_now = now.queue_time_by_class[static_cast<std::size_t>(Priority::kNormal)];
  normal_before.buckets = {1'000, 0, 0, 0};  // before the interval: not counted
  normal_now.buckets = {1'000 + 50, 48, 2, 0};
  now.devices[0].compute_time.buckets = {0, 0, 99, 1};
  const std::string text = joined(top::frame(before, now, 1.0, 200));
  INFO(text);
  // 100 this interval: the 50th falls at the top of (0, 1 ms]; the 99th in (2, 4 ms], half way.
  CHECK(shows(text, R"(queue time .*: p50 1\.00 ms, p99 3\.00 ms \(p99 by class: high -, normal 3\.00 ms, low -\))"));
  // 100 batches, 99 in (2, 4 ms]: the 50th at 2 + 2 x 50 / 99 ms, the 99th the last of them; a
  // p99 beyond the last bound says so.
  CHECK(shows(text, R"(compute time .*p50 3\.01 ms, p99 4\.00 ms)"));
  now.devices[0].compute_time.buckets = {0, 0, 1, 99};
  CHECK(shows(joined(top::frame(before, now, 1.0, 200)), R"(compute time .*p99 > 4\.00 ms)"));
}

TEST_CASE("a workers daemon's device line names the worker in its place; an empty place is absent") {
  DaemonStatus before = status(0, 0, 0, 0);
  DaemonStatus now = status(100, 0, 0, 10);
  now.devices[0].worker_pid = 4242;
  now.devices[0].worker_name = "langid";
  now.devices[0].worker_version = "0.4.0";
  now.devices[1].state = "absent";
  const std::string text = joined(top::frame(before, now, 1.0, 160));
  INFO(text);
  CHECK(shows(text, R"(^0 +healthy .*worker langid 0\.4\.0 pid 4242$)"));
  CHECK(shows(text, R"(^1 +absent )"));
  CHECK(!shows(text, R"(^1 .*worker)"));
}

TEST_CASE("a laggard device says so, and its share is of the interval's batches") {
  DaemonStatus before = status(0, 0, 0, 0);
  DaemonStatus now = status(0, 0, 0, 0);
  now.devices[1].state = "healthy";
  now.devices[1].laggard = true;
  now.devices[0].batches_ok = 300;  // 150/s
  now.devices[1].batches_ok = 100;  // 50/s
  const std::string text = joined(top::frame(before, now, 2.0, 120));
  INFO(text);
  CHECK(shows(text, R"(^0 +healthy +150 +75% )"));
  CHECK(shows(text, R"(^1 +laggard +50 +25% )"));
}

TEST_CASE("a daemon of many models has a row per model: answers, pending, queue and compute per request") {
  DaemonStatus before = status(0, 0, 0, 0);
  DaemonStatus now = status(300, 2, 0, 30);
  before.models.resize(2);
  now.models.resize(2);
  for (DaemonStatus* s : {&before, &now}) {
    s->models[0].name = "batchstring";
    s->models[0].state = "ready";
    s->models[0].lanes = 2;
    s->models[1].name = "langid";
    s->models[1].state = "unavailable";
  }
  before.models[0].requests_ok = 100;
  before.models[0].inferences = 100;
  before.models[0].queue_ns = 1'000'000;
  now.models[0].requests_ok = 300;  // 200 this interval, each queued 1.5 us and computed 2 us
  now.models[0].requests_failed = 2;
  now.models[0].inferences = 300;
  now.models[0].queue_ns = 1'300'000;
  now.models[0].compute_ns = 400'000;
  now.models[1].pending = 7;
  const std::string text = joined(top::frame(before, now, 2.0, 160));
  INFO(text);
  CHECK(shows(text, R"(^model +state +lanes +ok/s +failed/s +pending +queue/req +compute/req$)"));
  CHECK(shows(text, R"(^batchstring +ready +2 +100 +1 +0 +1\.5 us +2\.0 us$)"));
  CHECK(shows(text, R"(^langid +unavailable +0 +0 +0 +7 +- +-$)"));
  // One model: no model rows, the frame as before models.
  now.models.resize(1);
  CHECK_FALSE(shows(joined(top::frame(before, now, 2.0, 160)), R"(^model +state)"));
}

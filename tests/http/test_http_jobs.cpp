// Asynchronous jobs with the embedded store, end to end: the batchd and batchd-http binaries and
// real HTTP. Submit, poll, outputs against SHA-256, inputs' order, DELETE, 404s, the store's
// bounds (count and bytes), the TTL, polls answered by another worker than the submission's, and
// the jobs series in /metrics.
#include <doctest/doctest.h>

#include <random>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "tests/http/jobs_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

// A cpu daemon and a front-end with several workers and the jobs flags given.
struct Stack {
  explicit Stack(std::vector<std::string> frontend_args = {},
                 std::vector<std::string> daemon_args = {"--max-wait-ms", "1", "--max-input-bytes", "1024"})
      : socket(temp_socket_path()), daemon(socket, daemon_args), frontend(socket, with_defaults(frontend_args)) {}

  static std::vector<std::string> with_defaults(std::vector<std::string> args) {
    std::vector<std::string> all{"--workers", "3", "--timeout-ms", "5000"};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  HttpResponse call(const std::string& request) const {
    HttpClient client(frontend.port());
    auto response = client.round_trip(request);
    REQUIRE(response.has_value());
    return *response;
  }

  // Submits and returns the id; the job must be accepted.
  std::string submit(const std::string& request) const {
    const HttpResponse r = call(request);
    REQUIRE_MESSAGE(r.status == 202, r.body);
    const JobView job = parse_job(r.body);
    CHECK(job.status == "pending");
    CHECK(r.header("location") == "/v1/jobs/" + job.id);
    return job.id;
  }

  JobView finished(const std::string& id) const {
    HttpClient client(frontend.port());
    const HttpResponse r = poll_until_finished(client, id, grace(5000ms));
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return parse_job(r.body);
  }

  std::string socket;
  DaemonProcess daemon;
  FrontendProcess frontend;
};

double metric(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  REQUIRE_MESSAGE(at != std::string::npos, name);
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("a job's answer: one input, many inputs in order, ids unique and unguessable") {
  Stack stack;
  const std::string id = stack.submit(job_request("hello"));
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  const JobView one = stack.finished(id);
  CHECK(one.status == "done");
  CHECK(one.id == id);
  CHECK(one.output == reference_batchstring("hello", 1));

  std::mt19937_64 rng(12);
  std::vector<std::string> inputs;
  for (int i = 0; i < 50; ++i) inputs.push_back(random_utf8(rng, rng() % 200));
  inputs.emplace_back("");  // the empty input is an input too
  const std::string many_id = stack.submit(jobs_request(inputs));
  CHECK(many_id != id);
  const JobView many = stack.finished(many_id);
  CHECK(many.status == "done");
  REQUIRE(many.outputs.size() == inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    CAPTURE(i);
    CHECK(many.outputs[i] == reference_batchstring(inputs[i], 1));
  }
  // With a priority and a timeout header, as the synchronous API takes them.
  const std::string high = stack.submit(
      make_request("POST", "/v1/jobs", R"({"input":"x","priority":"high"})", {"X-Timeout-Ms: 2000"}));
  CHECK(stack.finished(high).output == reference_batchstring("x", 1));
}

TEST_CASE("jobs polled on other workers than the one that took them") {
  // Each request on a fresh connection: SO_REUSEPORT spreads them over the three workers, so most
  // polls land on a worker that did not submit the job.
  Stack stack;
  const std::size_t jobs = scaled(200, 20);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < jobs; ++i) ids.push_back(stack.submit(job_request("job " + std::to_string(i))));
  for (std::size_t i = 0; i < jobs; ++i) {
    CAPTURE(i);
    const JobView job = stack.finished(ids[i]);
    CHECK(job.status == "done");
    CHECK(job.output == reference_batchstring("job " + std::to_string(i), 1));
  }
}

TEST_CASE("DELETE: a done job is deleted, a pending one cancelled; unknown ids are 404") {
  // A sim daemon whose batches take 300 ms, so a job stays pending long enough to cancel.
  Stack stack({}, {"--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "300000", "--max-wait-ms", "1"});
  const std::string done_id = stack.submit(job_request("abc"));
  const JobView done = stack.finished(done_id);
  CHECK(done.status == "done");
  CHECK(done.output == "cba");  // the sim answers the input reversed

  const HttpResponse deleted = stack.call(make_request("DELETE", "/v1/jobs/" + done_id));
  CHECK(deleted.status == 200);
  CHECK(parse_job(deleted.body).status == "deleted");
  check_error(stack.call(poll_request(done_id)), 404, "job_not_found");
  check_error(stack.call(make_request("DELETE", "/v1/jobs/" + done_id)), 404, "job_not_found");

  // Two jobs: the first keeps the one device busy, so the second waits unclaimed and is withdrawn.
  const std::string busy = stack.submit(job_request("busy"));
  const std::string pending_id = stack.submit(jobs_request({"p1", "p2"}));
  const HttpResponse cancelled = stack.call(make_request("DELETE", "/v1/jobs/" + pending_id));
  CHECK(cancelled.status == 200);
  CHECK(parse_job(cancelled.body).status == "cancelled");
  check_error(stack.call(poll_request(pending_id)), 404, "job_not_found");
  CHECK(stack.finished(busy).output == "ysub");
  // Its withdrawn requests came back and found no record to fill: it stays gone.
  std::this_thread::sleep_for(grace(400ms));
  check_error(stack.call(poll_request(pending_id)), 404, "job_not_found");

  check_error(stack.call(poll_request(std::string(32, 'a'))), 404, "job_not_found");
  check_error(stack.call(poll_request("not-an-id")), 404, "job_not_found");
  check_error(stack.call(make_request("GET", "/v1/jobs/" + std::string(32, 'A'))), 404, "job_not_found");
  const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
  CHECK(metric(metrics, "batchd_http_jobs_cancelled_total") == 1);
  CHECK(metric(metrics, "batchd_http_jobs_submitted_total") == 3);
}

TEST_CASE("400, 405 and 413 on submissions, as the synchronous API answers them") {
  Stack stack({"--jobs-max-inputs", "4"});
  check_error(stack.call(make_request("POST", "/v1/jobs", "{\"input\": ")), 400, "invalid_json");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"text":"x"})")), 400, "missing_field");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"input":42})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"inputs":"x"})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"inputs":[]})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"inputs":["a",1]})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"input":"a","inputs":["b"]})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"input":"a","priority":"urgent"})")), 400,
              "bad_priority");
  check_error(stack.call(job_request("x", {"X-Timeout-Ms: 0"})), 400, "bad_timeout");
  check_error(stack.call(make_request("POST", "/v1/jobs", "[\"a\"]")), 400, "bad_request");
  check_error(stack.call(jobs_request({"a", "b", "c", "d", "e"})), 413, "too_large");       // over --jobs-max-inputs
  check_error(stack.call(jobs_request({"a", std::string(2000, 'b')})), 413, "too_large");  // over the daemon's input
  const HttpResponse get_collection = stack.call(make_request("GET", "/v1/jobs"));
  check_error(get_collection, 405, "method_not_allowed");
  CHECK(get_collection.header("allow") == "POST");
  const HttpResponse put = stack.call(make_request("PUT", "/v1/jobs/" + std::string(32, 'a'), "x"));
  check_error(put, 405, "method_not_allowed");
  CHECK(put.header("allow") == "GET, HEAD, DELETE");
  // Nothing refused here was stored.
  CHECK(metric(stack.call(make_request("GET", "/metrics")).body, "batchd_http_jobs_stored") == 0);
}

TEST_CASE("the store's bounds: 503 jobs_store_full with Retry-After, and room again after a DELETE") {
  SUBCASE("count") {
    Stack stack({"--jobs-max", "5"});
    std::vector<std::string> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(stack.submit(job_request("n" + std::to_string(i))));
    for (const auto& id : ids) CHECK(stack.finished(id).status == "done");
    const HttpResponse full = stack.call(job_request("one too many"));
    check_error(full, 503, "jobs_store_full");
    CHECK(full.header("retry-after") == "1");
    CHECK(stack.call(make_request("DELETE", "/v1/jobs/" + ids[0])).status == 200);
    CHECK(stack.finished(stack.submit(job_request("room again"))).output == reference_batchstring("room again", 1));
    const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
    CHECK(metric(metrics, "batchd_http_jobs_store_full_total") == 1);
    CHECK(metric(metrics, "batchd_http_jobs_stored") == 5);
  }
  SUBCASE("bytes") {
    // 40 outputs of 64 hex digits make a record of about 2.8 KB: the second such job fills 4 KiB.
    Stack stack({"--jobs-max-bytes", "4096"});
    std::vector<std::string> inputs(40, "bytes");
    int accepted = 0;
    HttpResponse last;
    for (int i = 0; i < 4; ++i) {
      last = stack.call(jobs_request(inputs));
      if (last.status != 202) break;
      ++accepted;
      CHECK(stack.finished(parse_job(last.body).id).status == "done");
    }
    CHECK(accepted >= 1);
    CHECK(accepted <= 2);
    check_error(last, 503, "jobs_store_full");
    CHECK(last.body.find("bytes") != std::string::npos);
  }
}

TEST_CASE("TTL: a finished job disappears after --jobs-ttl-s") {
  Stack stack({"--jobs-ttl-s", "1"});
  const std::string id = stack.submit(job_request("short-lived"));
  const auto submitted = std::chrono::steady_clock::now();
  CHECK(stack.finished(id).status == "done");
  HttpClient client(stack.frontend.port());
  bool gone = false;
  const auto until = std::chrono::steady_clock::now() + 1000ms + grace(2000ms);
  while (!gone && std::chrono::steady_clock::now() < until) {
    auto r = client.round_trip(poll_request(id));
    REQUIRE(r.has_value());
    gone = r->status == 404;
    if (!gone) {
      CHECK(parse_job(r->body).status == "done");
      std::this_thread::sleep_for(50ms);
    }
  }
  CHECK(gone);
  CHECK(std::chrono::steady_clock::now() - submitted >= 900ms);  // not before its time
  const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
  CHECK(metric(metrics, "batchd_http_jobs_expired_total") == 1);
  CHECK(metric(metrics, "batchd_http_jobs_done_total") == 1);
  CHECK(metric(metrics, "batchd_http_jobs_stored") == 0);
}

TEST_CASE("a failed job carries the synchronous API's typed error") {
  // The sim fails every input that starts with the poison prefix.
  Stack stack({}, {"--backend", "sim", "--sim-poison", "bad", "--max-wait-ms", "1"});
  const JobView failed = stack.finished(stack.submit(jobs_request({"fine", "bad input"})));
  CHECK(failed.status == "failed");
  CHECK(failed.error_code == "backend_error");
  CHECK(failed.outputs.empty());
  const JobView ok = stack.finished(stack.submit(job_request("fine")));
  CHECK(ok.status == "done");
  CHECK(ok.output == "enif");
  const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
  CHECK(metric(metrics, "batchd_http_jobs_failed_total") == 1);
  CHECK(metric(metrics, "batchd_http_jobs_done_total") == 1);
  CHECK(metric(metrics, "batchd_http_requests_total{code=\"202\"}") == 2);
}

TEST_CASE("a job names its model: answered by that model; an unknown or malformed name refused") {
  Stack stack({}, {"--max-wait-ms", "1", "--model", "reversed:backend=sim,sim_devices=1,sim_fixed_us=100"});
  const JobView reversed = stack.finished(
      stack.submit(make_request("POST", "/v1/jobs", R"({"inputs":["abc","héllo"],"model":"reversed"})")));
  CHECK(reversed.status == "done");
  CHECK(reversed.outputs == std::vector<std::string>{"cba", "olléh"});
  const JobView by_default = stack.finished(stack.submit(job_request("abc")));
  CHECK(by_default.output == reference_batchstring("abc", 1));
  const JobView named_default =
      stack.finished(stack.submit(make_request("POST", "/v1/jobs", R"({"input":"abc","model":"batchstring"})")));
  CHECK(named_default.output == reference_batchstring("abc", 1));

  const HttpResponse unknown = stack.call(make_request("POST", "/v1/jobs", R"({"input":"abc","model":"nope"})"));
  check_error(unknown, 404, "unknown_model");
  CHECK(unknown.body.find("reversed") != std::string::npos);  // it lists the models served
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"input":"abc","model":7})")), 400, "bad_request");
  check_error(stack.call(make_request("POST", "/v1/jobs", R"({"input":"abc","model":""})")), 400, "bad_request");
}

TEST_CASE("the embedded queue absorbs a burst of six times the daemon's slots; a deleted waiting job never runs") {
  // A slow device (batches of 64 every 20 ms: 3,200 inputs/s), and a consumer that takes 64
  // inputs at a time: 200 jobs of 32 inputs wait in batchd-http's memory, none refused.
  Stack stack({"--jobs-inputs-in-flight", "64"},
              {"--backend", "sim", "--sim-repeat", "1", "--sim-devices", "1", "--sim-fixed-us", "20000",
               "--sim-per-item-us", "0", "--max-batch", "64", "--policy", "fixed", "--max-wait-ms", "1"});
  constexpr std::size_t kJobs = 200, kInputs = 32, kDeleted = 20;
  const auto inputs_of = [](std::size_t job) {
    std::vector<std::string> inputs;
    for (std::size_t k = 0; k < kInputs; ++k) inputs.push_back("burst " + std::to_string(job) + "." + std::to_string(k));
    return inputs;
  };
  std::vector<std::string> ids;
  {
    HttpClient client(stack.frontend.port());
    for (std::size_t j = 0; j < kJobs; ++j) {
      auto r = client.round_trip(jobs_request(inputs_of(j)));
      REQUIRE(r.has_value());
      REQUIRE_MESSAGE(r->status == 202, r->body);
      ids.push_back(parse_job(r->body).id);
    }
    // The last ones still wait (the burst takes the device 2 s): deleted, they never run.
    for (std::size_t j = kJobs - kDeleted; j < kJobs; ++j) {
      auto r = client.round_trip(make_request("DELETE", "/v1/jobs/" + ids[j]));
      REQUIRE(r.has_value());
      CHECK(parse_job(r->body).status == "cancelled");
    }
  }
  HttpClient client(stack.frontend.port());
  for (std::size_t j = 0; j < kJobs - kDeleted; ++j) {
    const HttpResponse r = poll_until_finished(client, ids[j], grace(20000ms));
    const JobView job = parse_job(r.body);
    REQUIRE_MESSAGE(job.status == "done", r.body);
    REQUIRE(job.outputs.size() == kInputs);
    const std::vector<std::string> inputs = inputs_of(j);
    for (std::size_t k = 0; k < kInputs; ++k) CHECK(job.outputs[k] == std::string(inputs[k].rbegin(), inputs[k].rend()));
  }
  for (std::size_t j = kJobs - kDeleted; j < kJobs; ++j) {
    CHECK(client.round_trip(poll_request(ids[j]))->status == 404);
  }
  const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
  CHECK(metric(metrics, "batchd_http_jobs_submitted_total") == kJobs);
  CHECK(metric(metrics, "batchd_http_jobs_done_total") == kJobs - kDeleted);
  CHECK(metric(metrics, "batchd_http_jobs_consumed_total") == kJobs - kDeleted);
  CHECK(metric(metrics, "batchd_http_jobs_store_full_total") == 0);
}

TEST_CASE("a job of more inputs than the node's client holds fails too_large at once, and the queue goes on") {
  Stack stack({}, {"--max-wait-ms", "1", "--slots-per-client", "8"});
  const std::string big = stack.submit(jobs_request(std::vector<std::string>(12, "x")));
  const JobView failed = stack.finished(big);
  CHECK(failed.status == "failed");
  CHECK(failed.error_code == "too_large");
  const std::vector<std::string> inputs = {"a", "b", "c"};
  const JobView done = stack.finished(stack.submit(jobs_request(inputs)));
  REQUIRE(done.outputs.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(done.outputs[i] == reference_batchstring(inputs[i], 1));
}

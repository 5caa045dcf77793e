// The jobs queue on Redis Streams (--jobs-redis; docs/JOBS.md), end to end with a redis-server
// this test starts: a node killed (daemon and front-end, SIGKILL) while it holds jobs loses none of
// them, another node answers every one; Redis killed and restarted (append-only file, fsync at
// every write) loses no accepted job; a poison input, an entry delivered too often and entries
// that another service wrote badly are dead-lettered with their reason while every other job is
// answered right; batchctl jobs lists the dead letters, requeues one (its job then done) and drops
// another.
#include <signal.h>

#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <simdjson.h>

#include "backend/sim_reference.hpp"
#include "tests/http/jobs_test_support.hpp"
#include "tests/http/redis_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

// A node: a sim daemon (answers: the input reversed) and a front-end consuming the shared queue.
struct Node {
  Node(const std::string& redis_url, std::vector<std::string> daemon_args, std::vector<std::string> frontend_args = {})
      : socket(temp_socket_path()), daemon(socket, with_sim(std::move(daemon_args))),
        frontend(socket, with_jobs(redis_url, std::move(frontend_args))) {}

  static std::vector<std::string> with_sim(std::vector<std::string> args) {
    args.insert(args.begin(), {"--backend", "sim", "--sim-repeat", "1", "--max-wait-ms", "2"});
    return args;
  }
  static std::vector<std::string> with_jobs(const std::string& url, std::vector<std::string> args) {
    args.insert(args.begin(), {"--workers", "2", "--timeout-ms", "10000", "--jobs-redis", url,
                               "--jobs-claim-idle-ms", "1000"});
    return args;
  }
  // A crash of the whole node: no clean-up, no answers for what it holds.
  void kill9() {
    frontend.signal(SIGKILL);
    frontend.wait_exit(10s);
    daemon.kill9();
  }

  std::string socket;
  DaemonProcess daemon;
  FrontendProcess frontend;
};

std::vector<std::string> inputs_for(std::size_t job) {
  // Every fourth job has three inputs, the others one.
  std::vector<std::string> inputs;
  for (std::size_t k = 0; k < (job % 4 == 0 ? 3 : 1); ++k) {
    inputs.push_back("queued job " + std::to_string(job) + "/" + std::to_string(k));
  }
  return inputs;
}

std::string submit_request(std::size_t job) {
  const std::vector<std::string> inputs = inputs_for(job);
  return inputs.size() == 1 ? job_request(inputs.front()) : jobs_request(inputs);
}

bool right_answer(const JobView& view, std::size_t job) {
  const std::vector<std::string> inputs = inputs_for(job);
  if (view.status != "done") return false;
  if (inputs.size() == 1) return view.output == sim_expected_output(inputs.front(), 1);
  if (view.outputs.size() != inputs.size()) return false;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    if (view.outputs[k] != sim_expected_output(inputs[k], 1)) return false;
  }
  return true;
}

std::uint64_t metric(std::uint16_t port, const std::string& name) {
  HttpClient client(port);
  auto r = client.round_trip(make_request("GET", "/metrics"));
  REQUIRE(r.has_value());
  const std::size_t at = r->body.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stoull(r->body.substr(at + name.size() + 2));
}

// Polls every job through `port` until none is pending (or the time is up); counts the outcomes.
struct Outcomes {
  std::size_t right = 0, wrong = 0, pending = 0, missing = 0;
  std::string first_wrong;
};
Outcomes poll_all(std::uint16_t port, const std::vector<std::string>& ids, std::chrono::milliseconds timeout) {
  Outcomes o;
  HttpClient client(port);
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i].empty()) continue;  // never accepted
    for (;;) {
      auto r = client.round_trip(poll_request(ids[i]));
      REQUIRE(r.has_value());
      const JobView view = parse_job(r->body);
      if (r->status == 200 && view.status == "pending" && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(5ms);
        continue;
      }
      if (r->status == 404) {
        ++o.missing;
      } else if (view.status == "pending") {
        ++o.pending;
      } else if (right_answer(view, i)) {
        ++o.right;
      } else {
        ++o.wrong;
        if (o.first_wrong.empty()) o.first_wrong = "job " + std::to_string(i) + ": " + r->body;
      }
      break;
    }
  }
  return o;
}

}  // namespace

TEST_CASE("a node SIGKILLed while it holds hundreds of jobs: another node answers every one, right") {
  RedisServer redis;
  // Node A is slow (batches of 4 at 50 ms: 80 inputs/s) and takes at most 40 inputs at once, so
  // when it dies most jobs still wait in the stream and 40 are pending on it, mid-run.
  auto a = std::make_unique<Node>(redis.url(), std::vector<std::string>{"--sim-devices", "1", "--sim-fixed-us", "50000",
                                                                        "--max-batch", "4", "--policy", "fixed"},
                                  std::vector<std::string>{"--jobs-inputs-in-flight", "40"});
  const std::size_t total = scaled(400, 300);
  std::vector<std::string> ids(total);
  {
    HttpClient client(a->frontend.port());
    for (std::size_t i = 0; i < total; ++i) {
      auto r = client.round_trip(submit_request(i));
      REQUIRE(r.has_value());
      REQUIRE_MESSAGE(r->status == 202, r->body);
      ids[i] = parse_job(r->body).id;
    }
  }
  const std::uint16_t a_port = a->frontend.port();
  const std::uint64_t done_by_a = metric(a_port, "batchd_http_jobs_done_total");
  const std::uint64_t consumed_by_a = metric(a_port, "batchd_http_jobs_consumed_total");
  a->kill9();
  a.reset();
  const std::uint64_t pending_at_kill = total - done_by_a;
  CHECK(pending_at_kill >= std::min<std::uint64_t>(200, total - 50));
  CHECK(consumed_by_a > done_by_a);  // A held jobs it never answered

  Node b(redis.url(), {"--sim-devices", "2"});
  const Outcomes o = poll_all(b.frontend.port(), ids, grace(30000ms));
  CHECK_MESSAGE(o.right == total, o.first_wrong);
  CHECK(o.wrong == 0);
  CHECK(o.pending == 0);
  CHECK(o.missing == 0);
  const std::uint64_t redelivered = metric(b.frontend.port(), "batchd_http_jobs_redelivered_total");
  const std::uint64_t duplicates = metric(b.frontend.port(), "batchd_http_jobs_duplicates_total");
  CHECK(redelivered > 0);  // B claimed what A held when it died
  MESSAGE(total << " jobs accepted through A; A answered " << done_by_a << " and held " << consumed_by_a - done_by_a
                << " when SIGKILLed (" << pending_at_kill << " pending); B answered the rest: " << o.right
                << " right, 0 lost; B claimed " << redelivered << " from A; duplicates (answered twice): " << duplicates);
}

TEST_CASE("Redis killed and restarted (appendfsync always) while jobs flow: no accepted job lost") {
  RedisServer redis(RedisServer::Persistence::kAofAlways);
  Node a(redis.url(), {"--sim-devices", "2"});
  Node b(redis.url(), {"--sim-devices", "2"});
  std::mutex mu;
  std::vector<std::pair<std::size_t, std::string>> accepted;  // job number, id
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> refused{0}, surprises{0};
  std::atomic<bool> stop{false};
  std::string first_surprise;
  auto submitter = [&] {
    std::optional<HttpClient> client;
    while (!stop.load()) {
      if (!client) client.emplace(a.frontend.port());
      const std::size_t i = next.fetch_add(1);
      auto r = client->round_trip(submit_request(i));
      if (!r) {
        client.reset();
        continue;
      }
      if (r->status == 202) {
        std::lock_guard lock(mu);
        accepted.emplace_back(i, parse_job(r->body).id);
      } else if (r->status == 503 && error_code_of(r->body) == "jobs_store_unavailable") {
        refused.fetch_add(1);
        std::this_thread::sleep_for(5ms);
      } else {
        surprises.fetch_add(1);
        std::lock_guard lock(mu);
        if (first_surprise.empty()) first_surprise = std::to_string(r->status) + " " + r->body;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(submitter);
  auto accepted_count = [&] {
    std::lock_guard lock(mu);
    return accepted.size();
  };
  REQUIRE(eventually([&] { return accepted_count() >= 200; }, grace(10000ms)));
  redis.stop(SIGKILL);
  std::this_thread::sleep_for(300ms);
  const std::size_t before_restart = accepted_count();
  redis.start();
  REQUIRE(eventually([&] { return accepted_count() >= before_restart + 200; }, grace(20000ms)));
  stop.store(true);
  for (auto& t : threads) t.join();
  CHECK_MESSAGE(surprises == 0, first_surprise);

  std::vector<std::string> ids(next.load());
  for (const auto& [i, id] : accepted) ids[i] = id;
  const Outcomes o = poll_all(b.frontend.port(), ids, grace(30000ms));
  CHECK_MESSAGE(o.right == accepted.size(), o.first_wrong);
  CHECK(o.wrong == 0);
  CHECK(o.pending == 0);
  CHECK(o.missing == 0);
  const std::uint64_t duplicates = metric(a.frontend.port(), "batchd_http_jobs_duplicates_total") +
                                   metric(b.frontend.port(), "batchd_http_jobs_duplicates_total");
  MESSAGE(accepted.size() << " jobs accepted (" << before_restart << " before Redis was killed), " << o.right
                          << " answered right, 0 lost; " << refused.load()
                          << " submissions refused 503 while Redis was down; duplicates: " << duplicates);
}

TEST_CASE("dead letters: a poison input, an entry delivered too often, and malformed entries; the rest right") {
  RedisServer redis;
  RedisCli cli(redis.port());
  const std::string stream = "batchd:jobs:batchstring:normal";
  // An entry already delivered three times (to a consumer that died each time) before any node
  // came: the first node to claim it delivers it a fourth time, past the limit of 3.
  const std::string tired_id = "0000000000000000000000000000000a";
  REQUIRE(cli.run({"XGROUP", "CREATE", stream, "batchd", "0", "MKSTREAM"}).error.empty());
  const std::string tired_entry = cli.run({"XADD", stream, "*", "id", tired_id, "input", "tired"}).strings.at(0);
  REQUIRE(cli.run({"XREADGROUP", "GROUP", "batchd", "ghost", "COUNT", "1", "STREAMS", stream, ">"}).error.empty());
  for (int k = 0; k < 2; ++k) REQUIRE(cli.run({"XCLAIM", stream, "batchd", "ghost", "0", tired_entry}).error.empty());

  Node node(redis.url(), {"--sim-devices", "2", "--sim-poison", "POISON"});
  // Written straight into the stream, as another service would, each wrong in its own way.
  struct Bad {
    std::vector<std::string> fields;
    std::string reason;  // what the dead letter's reason must say
  };
  const std::string big(2 << 20, 'x');
  const std::vector<Bad> bad = {
      {{"input", "no id"}, R"(no "id" field)"},
      {{"id", "NOT-HEX", "input", "x"}, R"(field "id" is not 32 lower-case hex digits)"},
      {{"id", "00000000000000000000000000000001"}, R"(no "input" or "inputs" field)"},
      {{"id", "00000000000000000000000000000002", "inputs", "[\"a\", 7]"}, "holds something not a string"},
      {{"id", "00000000000000000000000000000003", "inputs", "[\"a\""}, "is not a JSON array"},
      {{"id", "00000000000000000000000000000004", "input", std::string("\xff\xfe", 2)}, "is not valid UTF-8"},
      {{"id", "00000000000000000000000000000005", "input", big}, "too_large"},
      {{"id", "00000000000000000000000000000006", "input", "x", "deadline_ms", "soon"}, R"(field "deadline_ms")"},
      {{"id", "00000000000000000000000000000007", "input", "x", "timeout_ms", "-5"}, R"(field "timeout_ms")"},
      {{"id", "00000000000000000000000000000008", "input", "x", "input", "y"}, "given twice"},
  };
  for (const Bad& b : bad) {
    std::vector<std::string> args = {"XADD", stream, "*"};
    args.insert(args.end(), b.fields.begin(), b.fields.end());
    REQUIRE(cli.run(args).error.empty());
  }
  // A good entry from the same service, after the bad ones: consumption went on.
  const std::string external_id = "000000000000000000000000000000ff";
  REQUIRE(cli.run({"XADD", stream, "*", "id", external_id, "input", "from another service"}).error.empty());

  // Through the API: good jobs around two poison ones.
  HttpClient client(node.frontend.port());
  const std::size_t total = 40;
  std::vector<std::string> ids(total);
  std::vector<std::string> poison_ids;
  for (std::size_t i = 0; i < total; ++i) {
    const bool poison = i == 10 || i == 30;
    auto r = client.round_trip(poison ? job_request("POISON " + std::to_string(i)) : submit_request(i));
    REQUIRE(r.has_value());
    REQUIRE(r->status == 202);
    (poison ? poison_ids.emplace_back() : ids[i]) = parse_job(r->body).id;
  }
  const Outcomes o = poll_all(node.frontend.port(), ids, grace(20000ms));
  CHECK_MESSAGE(o.right == total - poison_ids.size(), o.first_wrong);
  CHECK(o.wrong + o.pending + o.missing == 0);
  for (const std::string& id : poison_ids) {
    const JobView view = parse_job(poll_until_finished(client, id, grace(10000ms)).body);
    CHECK(view.status == "failed");
    CHECK(view.error_code == "backend_error");
  }
  const JobView external = parse_job(poll_until_finished(client, external_id, grace(10000ms)).body);
  CHECK(external.status == "done");
  CHECK(external.output == sim_expected_output("from another service", 1));
  // Its record appears only when it is dead-lettered (another service's entry has none before).
  HttpResponse tired;
  CHECK(eventually(
      [&] {
        tired = *client.round_trip(poll_request(tired_id));
        return tired.status == 200;
      },
      grace(10000ms)));
  CHECK(parse_job(tired.body).status == "failed");
  CHECK(parse_job(tired.body).error_code == "max_deliveries");
  CHECK(tired.body.find("delivered 4 times") != std::string::npos);
  const JobView malformed = parse_job(poll_until_finished(client, "00000000000000000000000000000003", 5000ms).body);
  CHECK(malformed.status == "failed");
  CHECK(malformed.error_code == "malformed_entry");

  // The dead-letter stream: each with its reason, the stream and entry it came from.
  std::vector<std::string> reasons;
  CHECK(eventually(
      [&] {
        const RedisValue dead = cli.run({"XRANGE", "batchd:jobs:dead", "-", "+"});
        reasons.clear();
        for (std::size_t k = 0; k + 1 < dead.strings.size(); ++k) {
          if (dead.strings[k] == "reason") reasons.push_back(dead.strings[k + 1]);
        }
        return reasons.size() >= bad.size() + poison_ids.size() + 1;
      },
      grace(10000ms)));
  CHECK(reasons.size() == bad.size() + poison_ids.size() + 1);
  auto has_reason = [&](const std::string& text) {
    for (const std::string& r : reasons) {
      if (r.find(text) != std::string::npos) return true;
    }
    return false;
  };
  for (const Bad& b : bad) CHECK_MESSAGE(has_reason(b.reason), "no dead letter says: " << b.reason);
  CHECK(has_reason("input_failed"));
  CHECK(has_reason("max_deliveries: delivered 4 times"));
  // Nothing is left unanswered in the stream.
  CHECK(eventually([&] { return cli.run({"XLEN", stream}).integer == 0; }, grace(5000ms)));
  CHECK(metric(node.frontend.port(), "batchd_http_jobs_dead_letters_total") == reasons.size());

  // batchctl jobs: the overview counts them; the tired job's dead letter requeued runs it (its
  // record pending again, then done); another dropped.
  const ProcessOutput overview_run = batchctl({"jobs", "--redis", redis.url(), "--json"});
  CHECK(overview_run.exit_code() == 0);
  const std::string& overview = overview_run.out;
  CHECK(overview.find("\"dead_letters\":" + std::to_string(reasons.size()) + "}") != std::string::npos);
  CHECK(overview.find(R"("model":"batchstring","priority":"normal","entries":0)") != std::string::npos);
  const ProcessOutput listed_json_run = batchctl({"jobs", "--redis", redis.url(), "--dead", "50", "--json"});
  CHECK(listed_json_run.exit_code() == 0);
  const std::string& listed_json = listed_json_run.out;
  std::string tired_letter, other_letter;
  simdjson::dom::parser parser;
  simdjson::dom::array letters;
  REQUIRE(parser.parse(listed_json).get_array().get(letters) == simdjson::SUCCESS);
  CHECK(letters.size() == reasons.size());
  for (const auto letter : letters) {
    std::string_view id, reason;
    REQUIRE(letter["dead_letter"].get_string().get(id) == simdjson::SUCCESS);
    REQUIRE(letter["reason"].get_string().get(reason) == simdjson::SUCCESS);
    (reason.starts_with("max_deliveries") ? tired_letter : other_letter) = std::string(id);
  }
  REQUIRE(!tired_letter.empty());
  const ProcessOutput listed_run = batchctl({"jobs", "--redis", redis.url(), "--dead", "50"});
  CHECK(listed_run.exit_code() == 0);
  const std::string& listed = listed_run.out;
  CHECK(listed.find(tired_letter) != std::string::npos);
  CHECK(listed.find("max_deliveries: delivered 4 times") != std::string::npos);
  CHECK(batchctl({"jobs", "--redis", redis.url(), "--requeue", tired_letter}).exit_code() == 0);
  CHECK(eventually(
      [&] {
        const JobView view = parse_job(client.round_trip(poll_request(tired_id))->body);
        return view.status == "done" && view.output == sim_expected_output("tired", 1);
      },
      grace(10000ms)));
  CHECK(batchctl({"jobs", "--redis", redis.url(), "--drop", other_letter}).exit_code() == 0);
  CHECK(batchctl({"jobs", "--redis", redis.url(), "--drop", other_letter}).exit_code() == 1);  // gone already
  CHECK(cli.run({"XLEN", "batchd:jobs:dead"}).integer == static_cast<long long>(reasons.size()) - 2);
}

TEST_CASE("the queue's bound refuses with 503 and Retry-After, and drops nothing accepted; deadlines expire") {
  RedisServer redis;
  // A daemon that never answers in time: the queue fills and the bound shows.
  const std::string socket = temp_socket_path();
  DaemonProcess daemon(socket, {"--backend", "sim", "--sim-repeat", "1", "--sim-fixed-us", "300000", "--max-batch", "1",
                                "--policy", "fixed", "--sim-devices", "1"});
  FrontendProcess frontend(socket, {"--workers", "1", "--jobs-redis", redis.url(), "--jobs-queue-max", "20",
                                    "--jobs-inputs-in-flight", "1", "--timeout-ms", "10000"});
  HttpClient client(frontend.port());
  std::vector<std::string> ids;
  std::size_t refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto r = client.round_trip(job_request("bounded " + std::to_string(i)));
    REQUIRE(r.has_value());
    if (r->status == 202) {
      ids.push_back(parse_job(r->body).id);
    } else {
      CHECK(r->status == 503);
      CHECK(error_code_of(r->body) == "jobs_queue_full");
      CHECK(r->header("retry-after") == "1");
      ++refused;
    }
  }
  CHECK(refused > 0);
  CHECK(ids.size() >= 20);
  CHECK(ids.size() <= 22);  // the bound, and what the consumer took meanwhile
  // A job whose deadline passes while it waits ends expired, not run.
  auto r = client.round_trip(make_request("POST", "/v1/jobs", R"({"input":"late"})", {"X-Job-Deadline-S: 1"}));
  REQUIRE(r.has_value());
  CHECK(r->status == 503);  // still full
  auto bad = client.round_trip(make_request("POST", "/v1/jobs", R"({"input":"x","deadline_s":0})"));
  REQUIRE(bad.has_value());
  CHECK(bad->status == 400);
  CHECK(error_code_of(bad->body) == "bad_deadline");
}

TEST_CASE("a job not started by its deadline ends expired") {
  RedisServer redis;
  const std::string socket = temp_socket_path();
  DaemonProcess daemon(socket, {"--backend", "sim", "--sim-repeat", "1", "--sim-fixed-us", "1500000", "--max-batch",
                                "1", "--policy", "fixed", "--sim-devices", "1"});
  FrontendProcess frontend(socket, {"--workers", "1", "--jobs-redis", redis.url(), "--jobs-inputs-in-flight", "1",
                                    "--timeout-ms", "10000"});
  HttpClient client(frontend.port());
  // The first takes the only room for 1.5 s; the second waits in the queue past its 1 s deadline.
  auto first = client.round_trip(job_request("first"));
  REQUIRE(first.has_value());
  REQUIRE(first->status == 202);
  auto late = client.round_trip(make_request("POST", "/v1/jobs", R"({"input":"late","deadline_s":1})"));
  REQUIRE(late.has_value());
  REQUIRE(late->status == 202);
  const JobView done = parse_job(poll_until_finished(client, parse_job(first->body).id, grace(10000ms)).body);
  CHECK(done.status == "done");
  const JobView expired = parse_job(poll_until_finished(client, parse_job(late->body).id, grace(10000ms)).body);
  CHECK(expired.status == "expired");
  CHECK(expired.error_code == "expired");
  CHECK(metric(frontend.port(), "batchd_http_jobs_deadline_expired_total") == 1);
}

TEST_CASE("a results stream: each job's answer published once, as its poll answers it") {
  RedisServer redis;
  RedisCli cli(redis.port());
  Node node(redis.url(), {"--sim-devices", "2", "--sim-poison", "POISON"},
            {"--jobs-results-stream", "batchstring", "--jobs-results-max", "1000"});
  HttpClient client(node.frontend.port());
  std::map<std::string, std::size_t> job_of;  // id -> job number
  const std::size_t total = 30;
  for (std::size_t i = 0; i < total; ++i) {
    auto r = client.round_trip(i == 7 ? job_request("POISON 7") : submit_request(i));
    REQUIRE(r.has_value());
    REQUIRE(r->status == 202);
    job_of[parse_job(r->body).id] = i;
  }
  // Read as a consumer service would: XREAD from the start until every job has appeared.
  std::map<std::string, std::pair<std::string, std::string>> published;  // id -> status, body
  std::size_t entries = 0;
  CHECK(eventually(
      [&] {
        const RedisValue all = cli.run({"XRANGE", "batchd:results:batchstring", "-", "+"});
        published.clear();
        entries = 0;
        // Flattened: entry id, then "id", ID, "status", S, "body", B.
        for (std::size_t k = 0; k + 7 <= all.strings.size(); k += 7) {
          ++entries;
          published[all.strings[k + 2]] = {all.strings[k + 4], all.strings[k + 6]};
        }
        return published.size() == total;
      },
      grace(10000ms)));
  CHECK(entries == total);  // once each
  for (const auto& [id, job] : job_of) {
    const auto it = published.find(id);
    REQUIRE(it != published.end());
    const auto poll = client.round_trip(poll_request(id));
    REQUIRE(poll.has_value());
    CHECK(it->second.second == poll->body);  // the body a poll answers with
    if (job == 7) {
      CHECK(it->second.first == "failed");
    } else {
      CHECK(it->second.first == "done");
      CHECK(right_answer(parse_job(it->second.second), job));
    }
  }
}

TEST_CASE("results streams need Redis: batchd-http refuses the flag without it") {
  const std::string socket = temp_socket_path();
  DaemonProcess daemon(socket, {"--backend", "sim"});
  const int status = run_to_exit({built_binary("BATCHD_HTTP_BIN"), "--socket", socket, "--listen", "127.0.0.1:0",
                                  "--jobs-results-stream", "batchstring"},
                                 10s);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
}

TEST_CASE("a node whose daemon is down takes no jobs: its front-end still accepts them, the other node runs them") {
  RedisServer redis;
  Node a(redis.url(), {"--sim-devices", "1"});
  Node b(redis.url(), {"--sim-devices", "2"});
  a.daemon.kill9();
  std::this_thread::sleep_for(300ms);  // A's client notices its daemon is gone
  const std::size_t total = 100;
  std::vector<std::string> ids(total);
  {
    HttpClient client(a.frontend.port());
    for (std::size_t i = 0; i < total; ++i) {
      auto r = client.round_trip(submit_request(i));
      REQUIRE(r.has_value());
      REQUIRE_MESSAGE(r->status == 202, r->body);
      ids[i] = parse_job(r->body).id;
    }
  }
  const Outcomes o = poll_all(b.frontend.port(), ids, grace(20000ms));
  CHECK_MESSAGE(o.right == total, o.first_wrong);
  CHECK(o.wrong + o.pending + o.missing == 0);
  CHECK(metric(a.frontend.port(), "batchd_http_jobs_consumed_total") == 0);
  CHECK(metric(b.frontend.port(), "batchd_http_jobs_redelivered_total") == 0);
}

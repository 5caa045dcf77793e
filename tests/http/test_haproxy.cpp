// Scale-out behind HAProxy with the shipped deploy/haproxy/batchd.cfg (only its example ports
// swapped for free ones): three nodes, each a batchd daemon and its batchd-http, under open-loop
// load through the balancer. A node killed with SIGKILL and restarted, and a node stopped with
// SIGTERM, must cost no request: the balancer retries what a dead node dropped (batchstring is
// pure, so that is safe) and /readyz takes a draining node out of rotation before it closes. A
// model only some nodes serve reaches only them.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kNodes = 3;

std::string env_or_fail(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set (run the tests through meson)");
  return value;
}

// The shipped configuration with the example's ports (balancer 8090, nodes 8081-8083, in the
// backend of every node and in the example model's) replaced.
std::string config_for(std::uint16_t front, const std::array<std::uint16_t, kNodes>& nodes) {
  std::ifstream in(env_or_fail("BATCHD_HAPROXY_CFG"));
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const auto swap = [&](const std::string& directive, const std::string& example, std::uint16_t to) {
    const std::string from = directive + " 127.0.0.1:" + example;
    const std::size_t at = config.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "the shipped config no longer says " << from);
    REQUIRE_MESSAGE(config.find(from, at + 1) == std::string::npos, from << " is said twice");
    config.replace(at, from.size(), directive + " 127.0.0.1:" + std::to_string(to));
  };
  swap("bind", "8090", front);
  for (std::size_t i = 0; i < kNodes; ++i) {
    swap("server node" + std::to_string(i + 1), "808" + std::to_string(i + 1), nodes[i]);
    swap("server langid-node" + std::to_string(i + 1), "808" + std::to_string(i + 1), nodes[i]);
  }
  return config;
}

// haproxy in the foreground (-db) on a config written to a temp file; stopped on destruction.
class Haproxy {
 public:
  explicit Haproxy(const std::string& config) {
    const std::string path = temp_socket_path("haproxy.cfg");
    std::ofstream(path) << config;
    const std::string binary = env_or_fail("BATCHD_HAPROXY_BIN");
    const ProcessOutput check = run_captured({binary, "-c", "-q", "-f", path}, 30s);
    REQUIRE_MESSAGE(check.exit_code() == 0, "haproxy -c: " << check.out << check.err);
    pid_ = spawn({binary, "-db", "-f", path});
  }
  ~Haproxy() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  Haproxy(const Haproxy&) = delete;
  Haproxy& operator=(const Haproxy&) = delete;

 private:
  pid_t pid_ = -1;
};

// A node: the daemon on the sim backend (2 devices of 2 ms + 20 us per request) and its front-end
// on a fixed port, so that it comes back where the balancer expects it.
struct Node {
  std::string socket = temp_socket_path();
  std::uint16_t port = free_port();
  std::optional<DaemonProcess> daemon;
  std::optional<FrontendProcess> http;

  void start(const std::vector<std::string>& http_args = {}, const std::vector<std::string>& daemon_args = {}) {
    std::vector<std::string> args_for_daemon{"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "2000",
                                             "--sim-per-item-us", "20"};
    args_for_daemon.insert(args_for_daemon.end(), daemon_args.begin(), daemon_args.end());
    daemon.emplace(socket, args_for_daemon);
    std::vector<std::string> args{"--listen", "127.0.0.1:" + std::to_string(port), "--workers", "1"};
    args.insert(args.end(), http_args.begin(), http_args.end());
    http.emplace(socket, args);
  }
  // A crash of the whole node: no drain, no answers for what it holds.
  void kill() {
    http->signal(SIGKILL);
    CHECK(http->wait_exit(10s) != -1);
    http.reset();
    daemon->kill9();
    daemon.reset();
  }
  // Requests this node's daemon took since it started (for one model, by name: 0 where it serves
  // no such model).
  [[nodiscard]] std::uint64_t taken() const { return connect(socket)->daemon_status().requests_taken; }
  [[nodiscard]] std::uint64_t taken(const std::string& model) const {
    for (const DaemonStatus::Model& m : connect(socket)->daemon_status().models) {
      if (m.name == model) return m.requests_taken;
    }
    return 0;
  }
};

// What the load generator's --csv rows say about one stretch of the run.
struct Stretch {
  double sent = 0;
  double ok = 0;
  double worst_p99_us = 0;
};

Stretch stretch(const std::string& csv, double from_s, double to_s) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // the header
  Stretch out;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream fields(line);
    for (std::string field; std::getline(fields, field, ',');) row.push_back(std::stod(field));
    if (row.size() != 7 || row[0] <= from_s || row[0] > to_s) continue;
    out.sent += row[1];
    out.ok += row[2];
    out.worst_p99_us = std::max(out.worst_p99_us, row[6]);
  }
  return out;
}

// 5,000 requests/s in the plain build; what a sanitizer build carries besides seven processes.
double load_rate() { return 5000.0 / slowdown(); }

std::future<StressRun> start_load(std::uint16_t front, double seconds, const std::string& csv) {
  return std::async(std::launch::async, [=] {
    return run_stress({"--http", "http://127.0.0.1:" + std::to_string(front), "--rate", std::to_string(load_rate()),
                       "--duration", std::to_string(seconds), "--connections", "128", "--pipeline-depth", "1",
                       "--expect-sim", "1", "--input-bytes", "16:64", "--timeout-ms", "5000", "--csv", csv,
                       "--quiet"});
  });
}

// True once a request through the balancer is answered (its first checks may still be running).
bool answers_through(std::uint16_t front) {
  return eventually([&] {
    try {
      HttpClient client(front, 2s);
      const auto r = client.round_trip(batch_request("warm-up"));
      return r && r->status == 200;
    } catch (const std::exception&) {
      return false;
    }
  }, 10s);
}

void check_every_answer(const StressRun& run) {
  INFO("stress stdout: " << run.process.out << "\nstderr: " << run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("sent") > 0);
  CHECK(run.field("ok") == run.field("sent"));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

}  // namespace

TEST_CASE("3 nodes behind the shipped HAProxy config: one killed at 5 s and restarted at 10 s costs no request") {
  std::array<Node, kNodes> nodes;
  for (Node& node : nodes) node.start();
  const std::uint16_t front = free_port();
  Haproxy haproxy(config_for(front, {nodes[0].port, nodes[1].port, nodes[2].port}));
  REQUIRE(answers_through(front));

  const std::string csv = temp_socket_path("load.csv");
  const auto start = std::chrono::steady_clock::now();
  std::future<StressRun> load = start_load(front, 15, csv);
  std::this_thread::sleep_until(start + 5s);
  nodes[1].kill();
  std::this_thread::sleep_until(start + 10s);
  nodes[1].start();
  const StressRun run = load.get();
  check_every_answer(run);
  const Stretch before = stretch(csv, 0, 5), during = stretch(csv, 5, 10), after = stretch(csv, 10, 1e9);
  MESSAGE("node kill through HAProxy at " << load_rate() << " req/s: sent " << run.field("sent") << ", ok "
          << run.field("ok") << ", failed " << run.field("errors") << ", wrong " << run.field("wrong")
          << "; worst per-second p99 before " << before.worst_p99_us / 1e3 << " ms, during "
          << during.worst_p99_us / 1e3 << " ms, after " << after.worst_p99_us / 1e3 << " ms");
  // The balancer took the restarted node back (rise 2 checks) and sent it work.
  CHECK(nodes[1].taken() > 0);
  CHECK(nodes[0].taken() > 0);
  CHECK(nodes[2].taken() > 0);
}

TEST_CASE("a node stopped with SIGTERM behind HAProxy: /readyz fails first while it still serves, and nothing fails") {
  std::array<Node, kNodes> nodes;
  for (Node& node : nodes) node.start({"--drain-delay-ms", "1500"});
  const std::uint16_t front = free_port();
  Haproxy haproxy(config_for(front, {nodes[0].port, nodes[1].port, nodes[2].port}));
  REQUIRE(answers_through(front));

  const std::string csv = temp_socket_path("load.csv");
  const auto start = std::chrono::steady_clock::now();
  std::future<StressRun> load = start_load(front, 6, csv);
  std::this_thread::sleep_until(start + 2s);
  Node& leaving = nodes[0];
  leaving.http->signal(SIGTERM);
  // Not ready at once, while a request sent to it directly is still answered.
  CHECK(eventually([&] {
    HttpClient client(leaving.port, 2s);
    const auto r = client.round_trip(make_request("GET", "/readyz"));
    return r && r->status == 503 && error_code_of(r->body) == "draining";
  }, grace(500ms)));
  {
    HttpClient client(leaving.port, 5s);
    const auto r = client.round_trip(batch_request("still served"));
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
  // Then it finishes what it owes and exits cleanly; the daemon behind it is stopped after it, as
  // systemd orders them (batchd-http.service is After=batchd.service).
  const int status = leaving.http->wait_exit(30s);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  leaving.http.reset();
  CHECK(leaving.daemon->stop() == 0);
  leaving.daemon.reset();
  const StressRun run = load.get();
  check_every_answer(run);
  const Stretch after = stretch(csv, 4, 1e9);
  CHECK(after.ok > 0);  // the other two nodes carried on
}

TEST_CASE("a model two of three nodes serve: through the shipped config its requests reach only those two") {
  std::array<Node, kNodes> nodes;
  nodes[0].start();
  nodes[1].start({}, {"--model", "langid"});
  nodes[2].start({}, {"--model", "langid"});
  const std::uint16_t front = free_port();
  Haproxy haproxy(config_for(front, {nodes[0].port, nodes[1].port, nodes[2].port}));
  REQUIRE(answers_through(front));
  // HAProxy counts a server up until its checks fail (2 at 500 ms): node 1, which has no langid,
  // leaves the model's backend within about a second. Then ten in a row are answered.
  const std::string infer = R"({"inputs":[{"name":"INPUT","datatype":"BYTES","shape":[1],"data":["routed"]}]})";
  int in_a_row = 0;
  CHECK(eventually([&] {
    HttpClient client(front, 2s);
    const auto r = client.round_trip(make_request("POST", "/v2/models/langid/infer", infer));
    in_a_row = r && r->status == 200 ? in_a_row + 1 : 0;
    return in_a_row >= 10;
  }, grace(5s)));
  const std::uint64_t default_before = nodes[0].taken();

  const StressRun run =
      run_stress({"--http", "http://127.0.0.1:" + std::to_string(front) + "/v2/models/langid/infer", "--protocol",
                  "v2", "--rate", std::to_string(load_rate() / 2), "--duration", "3", "--connections", "32",
                  "--pipeline-depth", "1", "--expect-sim", "1", "--input-bytes", "16:64", "--timeout-ms", "5000",
                  "--quiet"});
  // Node 1 would have refused each one (it serves no langid): every answer is right.
  check_every_answer(run);
  CHECK(nodes[1].taken("langid") > 0);
  CHECK(nodes[2].taken("langid") > 0);
  CHECK(nodes[0].taken() == default_before);
  // The default model, which has no backend of its own, still goes to every node.
  for (int i = 0; i < 30; ++i) {
    HttpClient client(front, 2s);
    const auto r = client.round_trip(batch_request("everywhere " + std::to_string(i)));
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
  CHECK(nodes[0].taken() > default_before);
}

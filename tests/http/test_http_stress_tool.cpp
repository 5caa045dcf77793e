// batchd-stress over HTTP (--http) against batchd-http: a clean run exits 0 with every request
// answered right, and answers of another SHA-256 cost are all counted wrong, with a failing exit;
// the pipelined open loop, and its measured window; priority classes sent as X-Priority. The same
// through the Open Inference Protocol: --protocol v2 against batchd-http's /v2 route, and
// --protocol grpc against batchd-grpc; and the combinations of --protocol, --http and --grpc that
// cannot work. (Servers other than batchd-http: test_stress_third_party.cpp.)
#include <signal.h>
#include <sys/wait.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr int kExitFailures = 1;  // batchd-stress: some answers were errors or wrong
constexpr int kExitUsage = 64;    // batchd-stress: the options cannot work together

// Debian's gRPC and abseil are not built with ThreadSanitizer, which therefore cannot see their
// locks: it reports races inside them (abseil's GraphCycles and StrCat, the event engine's epoll
// descriptor) as soon as batchd-grpc or a gRPC client starts. The gRPC cases run in the plain and
// ASan builds only (scripts/test.sh builds TSan's without gRPC), and in no build configured
// without it (meson -Dgrpc=disabled: no BATCHD_GRPC_BIN).
#if defined(__SANITIZE_THREAD__)
constexpr bool kGrpcUnderTsan = true;
#else
constexpr bool kGrpcUnderTsan = false;
#endif
const bool kNoGrpc = kGrpcUnderTsan || std::getenv("BATCHD_GRPC_BIN") == nullptr;

// batchd-grpc (BATCHD_GRPC_BIN) against a daemon, on a free loopback port. It attaches to the
// daemon on a thread of its own, possibly after it listens, and has no HTTP readiness route:
// it is taken as up once batchd-stress has had one inference answered through it.
class GrpcFrontend {
 public:
  explicit GrpcFrontend(const std::string& daemon_socket) {
    const std::string port_file = test::temp_socket_path("grpc.port");
    pid_ = test::spawn({test::built_binary("BATCHD_GRPC_BIN"), "--socket", daemon_socket, "--listen",
                        "127.0.0.1:0", "--port-file", port_file, "--log-level", "warn"});
    std::optional<std::uint16_t> port;
    bool exited = false;
    int status = 0;
    test::eventually(
        [&] {
          port = test::read_port(port_file);
          exited = !port && ::waitpid(pid_, &status, WNOHANG) == pid_;
          return port || exited;
        },
        test::grace(10s));
    if (!port) {
      if (exited) {
        pid_ = -1;
      } else {
        stop();
      }
      throw std::runtime_error(exited ? "batchd-grpc exited before it listened: " + test::describe_exit(status)
                                      : std::string("batchd-grpc did not start listening"));
    }
    target_ = "127.0.0.1:" + std::to_string(*port);
    test::ProcessOutput probe;
    const auto answers = [&] {
      probe = test::run_stress({"--grpc", target_, "--requests", "1", "--timeout-ms", "20000"}).process;
      return probe.exit_code() == 0;
    };
    if (!test::eventually(answers, test::grace(10s))) {
      stop();
      throw std::runtime_error("batchd-grpc did not answer an inference; batchd-stress said:\n" + probe.out +
                               probe.err);
    }
  }
  ~GrpcFrontend() {
    // A sanitizer report (a leak at exit, say) shows up only as a bad exit status: fail on it.
    const int status = stop();
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      FAIL_CHECK("batchd-grpc did not exit cleanly after SIGTERM: " << test::describe_exit(status));
    }
  }
  GrpcFrontend(const GrpcFrontend&) = delete;
  GrpcFrontend& operator=(const GrpcFrontend&) = delete;

  // HOST:PORT, as --grpc takes it.
  [[nodiscard]] const std::string& target() const noexcept { return target_; }

 private:
  // SIGTERM, then the waitpid status (-1 if it had to be killed).
  int stop() {
    int status = -1;
    if (pid_ <= 0) return status;
    ::kill(pid_, SIGTERM);
    if (!test::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 30s)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      return -1;
    }
    return status;
  }

  pid_t pid_ = -1;
  std::string target_;
};

std::vector<std::string> http_args(std::uint16_t port, std::uint64_t requests, const char* cost) {
  return {"--http", "http://127.0.0.1:" + std::to_string(port), "--threads", "2", "--requests",
          std::to_string(requests), "--cost", cost, "--timeout-ms", "20000"};
}

}  // namespace

TEST_CASE("--http: closed loop through batchd-http, every answer checked, exit 0") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun run = test::run_stress(http_args(frontend.port(), requests, "1"));
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("sent") == static_cast<double>(requests));
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

TEST_CASE("--http: answers of another cost are all counted wrong, and the exit status says so") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", "2", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(200, 50);
  const test::StressRun wrong = test::run_stress(http_args(frontend.port(), requests, "1"));
  INFO("stdout: ", wrong.process.out, "\nstderr: ", wrong.process.err);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("sent") == static_cast<double>(requests));
  CHECK(wrong.field("wrong") == static_cast<double>(requests));
  CHECK(wrong.field("ok") == 0);
  CHECK(wrong.field("errors") == 0);
  // The same daemon's answers checked at its own cost are all right.
  const test::StressRun right = test::run_stress(http_args(frontend.port(), requests, "2"));
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("ok") == static_cast<double>(requests));
  CHECK(right.field("wrong") == 0);
}

TEST_CASE("--http open loop: pipelined over several connections and epoll threads, every answer checked") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun run = test::run_stress(
      {"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--rate", "400",
       "--connections", "4", "--pipeline-depth", "8", "--io-threads", "2", "--requests",
       std::to_string(requests), "--timeout-ms", "20000"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

TEST_CASE("--http with --warmup and --cooldown: only the window's requests are counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const test::StressRun run = test::run_stress(
      {"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--rate", "400",
       "--duration", "0.5", "--warmup", "0.2", "--cooldown", "0.2", "--timeout-ms", "20000"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  // Exactly the requests whose intended send time falls in the 0.5 s window: 200 at 400/s. Both
  // follow from the schedule (intended send times), not from how fast this machine is.
  CHECK(run.field("sent") == doctest::Approx(200).epsilon(0.01));
  CHECK(run.field("ok") == run.field("sent"));
  CHECK(run.field("duration_s") == doctest::Approx(0.5));
}

TEST_CASE("--http with --priority-mix: X-Priority carries each request's class to the daemon") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  // Every caller granted high, so each claim runs as made.
  test::FrontendProcess frontend(socket, {"--workers", "1", "--default-max-priority", "high"});
  auto watcher = test::connect(socket);
  const std::uint64_t requests = test::scaled(400, 100);
  for (const bool open_loop : {false, true}) {
    CAPTURE(open_loop);
    const test::ClassCounts before = watcher->daemon_status().requests_taken_by_class;
    std::vector<std::string> args{"--http", "http://127.0.0.1:" + std::to_string(frontend.port()), "--requests",
                                  std::to_string(requests), "--timeout-ms", "20000", "--priority-mix",
                                  "high:25,normal:25,low:50"};
    if (open_loop) {
      args.insert(args.end(), {"--rate", "1000", "--connections", "2", "--pipeline-depth", "4"});
    } else {
      args.insert(args.end(), {"--threads", "2"});
    }
    const test::StressRun run = test::run_stress(args);
    INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
    REQUIRE(run.process.exit_code() == 0);
    test::ClassCounts expected = before;
    std::uint64_t total = 0;
    for (const Priority p : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
      const std::string at = "/by_class/" + std::string(priority_name(p));
      const auto sent = static_cast<std::uint64_t>(run.field(at + "/sent"));
      CHECK(sent > 0);
      CHECK(run.field(at + "/ok") == static_cast<double>(sent));
      expected[static_cast<std::size_t>(p)] += sent;
      total += sent;
    }
    CHECK(total == requests);
    CHECK(test::taken_by_class(*watcher, expected) == expected);
  }
}

namespace {

// Every request answered, and answered right.
void check_all_right(const test::StressRun& run, std::uint64_t requests) {
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("sent") == static_cast<double>(requests));
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

// Answers checked at another cost than the daemon's: every one of them counted wrong, so the
// answers really are read out of the protocol's responses and checked.
void check_all_wrong(const test::StressRun& run, std::uint64_t requests) {
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  CHECK(run.process.exit_code() == kExitFailures);
  CHECK(run.field("wrong") == static_cast<double>(requests));
  CHECK(run.field("ok") == 0);
  CHECK(run.field("errors") == 0);
}

}  // namespace

TEST_CASE("--protocol v2: closed and open loop through batchd-http's /v2 inference route, every answer checked") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::string url = "http://127.0.0.1:" + std::to_string(frontend.port());
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun closed = test::run_stress({"--http", url, "--protocol", "v2", "--threads", "2", "--requests",
                                                   std::to_string(requests), "--timeout-ms", "20000"});
  check_all_right(closed, requests);
  CHECK(closed.process.out.find(R"("protocol":"v2")") != std::string::npos);
  const test::StressRun open = test::run_stress({"--http", url, "--protocol", "v2", "--rate", "400", "--connections",
                                                 "4", "--pipeline-depth", "8", "--requests", std::to_string(requests),
                                                 "--timeout-ms", "20000"});
  check_all_right(open, requests);
  const std::uint64_t few = test::scaled(50, 10);
  check_all_wrong(test::run_stress({"--http", url, "--protocol", "v2", "--threads", "2", "--requests",
                                    std::to_string(few), "--cost", "2", "--timeout-ms", "20000"}),
                  few);
}

TEST_CASE("--protocol jobs: closed and open loop as asynchronous jobs, each polled until answered and checked") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  test::FrontendProcess frontend(socket, {"--workers", "1"});
  const std::string url = "http://127.0.0.1:" + std::to_string(frontend.port());
  const std::uint64_t requests = test::scaled(300, 50);
  const test::StressRun closed = test::run_stress({"--http", url, "--protocol", "jobs", "--threads", "2",
                                                   "--requests", std::to_string(requests), "--timeout-ms", "20000"});
  check_all_right(closed, requests);
  CHECK(closed.process.out.find(R"("protocol":"jobs")") != std::string::npos);
  const test::StressRun open = test::run_stress({"--http", url, "--protocol", "jobs", "--rate", "300", "--requests",
                                                 std::to_string(requests), "--timeout-ms", "20000"});
  check_all_right(open, requests);
  const std::uint64_t few = test::scaled(50, 10);
  check_all_wrong(test::run_stress({"--http", url, "--protocol", "jobs", "--rate", "200", "--requests",
                                    std::to_string(few), "--cost", "2", "--timeout-ms", "20000"}),
                  few);
  // A job refused is refused as a synchronous request is: an input over the daemon's limit, too_large.
  const test::StressRun large = test::run_stress({"--http", url, "--protocol", "jobs", "--threads", "1", "--requests",
                                                  "5", "--input-bytes", "70000:70000", "--timeout-ms", "20000"});
  INFO("stdout: ", large.process.out, "\nstderr: ", large.process.err);
  CHECK(large.field("errors") == 5);
  CHECK(large.process.out.find(R"("too_large":5)") != std::string::npos);
}

TEST_CASE("--protocol grpc: closed and open loop through batchd-grpc over several channels, every answer checked" *
          doctest::skip(kNoGrpc)) {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  GrpcFrontend frontend(socket);
  const std::uint64_t requests = test::scaled(400, 50);
  const test::StressRun closed = test::run_stress({"--grpc", frontend.target(), "--protocol", "grpc", "--threads", "2",
                                                   "--requests", std::to_string(requests), "--timeout-ms", "20000"});
  check_all_right(closed, requests);
  CHECK(closed.process.out.find(R"("transport":"grpc","protocol":"grpc","connections":2)") != std::string::npos);
  // Two lanes (completion queues), each with two channels of its own.
  const test::StressRun open = test::run_stress({"--grpc", frontend.target(), "--rate", "400", "--connections", "4",
                                                 "--io-threads", "2", "--requests", std::to_string(requests),
                                                 "--timeout-ms", "20000"});
  check_all_right(open, requests);
  const std::uint64_t few = test::scaled(50, 10);
  check_all_wrong(test::run_stress({"--grpc", frontend.target(), "--threads", "2", "--requests", std::to_string(few),
                                    "--cost", "2", "--timeout-ms", "20000"}),
                  few);
}

TEST_CASE("--protocol, --http and --grpc that do not fit together: a usage error that says why, before any load") {
  const struct {
    std::vector<std::string> args;
    const char* why;
  } cases[] = {
      {{"--protocol", "grpc"}, "needs --grpc HOST:PORT"},
      {{"--protocol", "grpc", "--http", "http://127.0.0.1:1"}, "not to --http"},
      {{"--grpc", "127.0.0.1:1", "--protocol", "v1"}, "goes with --protocol grpc"},
      {{"--grpc", "127.0.0.1:1", "--protocol", "v2"}, "goes with --protocol grpc"},
      {{"--protocol", "v2"}, "needs --http"},
      {{"--grpc", "127.0.0.1"}, "HOST:PORT"},
      {{"--grpc", "127.0.0.1:1", "--pipeline-depth", "4"}, "not --grpc"},
      {{"--grpc", "127.0.0.1:1", "--priority-mix", "high:50,low:50"}, "no priority classes"},
  };
  for (const auto& c : cases) {
    const test::StressRun run = test::run_stress(c.args);
    INFO("args: ", c.args.front(), " ", c.args[1], "\nstdout: ", run.process.out, "\nstderr: ", run.process.err);
    CHECK(run.process.exit_code() == kExitUsage);
    CHECK(run.process.err.find(c.why) != std::string::npos);
  }
}

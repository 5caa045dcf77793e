// The command-line tools against the batchd binary: batchctl's status report (text and JSON) and
// batchd-send's answer, messages and exit codes.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <algorithm>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "daemon/laggard_verdict.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr unsigned kDevices = 2;
constexpr int kAnswered = 20;

using test::batchctl;

test::ProcessOutput send(const std::vector<std::string>& args, std::string_view stdin_text = {}) {
  std::vector<std::string> argv{test::built_binary("BATCHD_SEND_BIN")};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_captured(argv, 30s, std::nullopt, stdin_text);
}

// A cpu daemon of kDevices devices that has answered kAnswered requests of one client, one at a
// time (so in batches of one): a quarter high, a quarter low, the rest normal.
struct AnsweredDaemon {
  std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon{socket, {"--backend", "cpu", "--cpu-threads", std::to_string(kDevices),
                                      "--max-wait-ms", "0.25", "--max-batch", "48", "--max-batch-bytes",
                                      "1048576"}};
  std::unique_ptr<Client> client = test::connect(socket);

  AnsweredDaemon() {
    for (int i = 0; i < kAnswered; ++i) {
      const Priority priority = i % 4 == 0 ? Priority::kHigh : i % 4 == 1 ? Priority::kLow : Priority::kNormal;
      REQUIRE(client->submit("req " + std::to_string(i), 10s, priority).ok());
    }
    // The status page is published every 50 ms or so.
    REQUIRE(test::eventually([&] {
      const DaemonStatus status = client->daemon_status();
      const auto& by_class = status.requests_taken_by_class;
      return status.requests_ok == kAnswered && by_class[0] + by_class[1] + by_class[2] == kAnswered;
    }, 10s));
  }
};

std::uint64_t uint_field(simdjson::dom::element object, const char* key) {
  std::uint64_t value = 0;
  REQUIRE_MESSAGE(object[key].get_uint64().get(value) == simdjson::SUCCESS, "no unsigned '" << key << "'");
  return value;
}

}  // namespace

TEST_CASE("batchctl --json: backend, pid, devices, clients, policy, and request and batch counts") {
  AnsweredDaemon d;
  const test::ProcessOutput run = batchctl({"--socket", d.socket, "--json"});
  INFO("stdout: ", run.out, "\nstderr: ", run.err);
  REQUIRE(run.exit_code() == 0);
  simdjson::dom::parser parser;
  simdjson::dom::element status;
  REQUIRE(parser.parse(run.out).get(status) == simdjson::SUCCESS);
  std::string_view backend;
  REQUIRE(status["backend"].get_string().get(backend) == simdjson::SUCCESS);
  CHECK(backend == "cpu");
  CHECK(uint_field(status, "daemon_pid") == static_cast<std::uint64_t>(d.daemon.pid()));
  CHECK(uint_field(status, "healthy_devices") == kDevices);
  // The test's client, and batchctl itself unless it read the page before the daemon counted it.
  CHECK(uint_field(status, "clients") >= 1);
  CHECK(uint_field(status, "clients") <= 2);
  CHECK(uint_field(status, "requests_taken") == kAnswered);
  simdjson::dom::element by_class;
  REQUIRE(status["requests_taken_by_class"].get(by_class) == simdjson::SUCCESS);
  CHECK(uint_field(by_class, "high") == kAnswered / 4);
  CHECK(uint_field(by_class, "normal") == kAnswered / 2);
  CHECK(uint_field(by_class, "low") == kAnswered / 4);
  CHECK(uint_field(status, "requests_ok") == kAnswered);
  CHECK(uint_field(status, "requests_failed") == 0);
  CHECK(uint_field(status, "requests_rejected") == 0);
  CHECK(uint_field(status, "in_flight") == 0);
  CHECK(uint_field(status, "requests_abandoned") == 0);
  std::string_view policy;
  REQUIRE(status["policy"].get_string().get(policy) == simdjson::SUCCESS);
  CHECK(policy == "adaptive");
  CHECK(uint_field(status, "target_batch") >= 1);
  CHECK(uint_field(status, "max_batch") == 48);
  CHECK(uint_field(status, "max_wait_ns") == 250'000);
  CHECK(uint_field(status, "max_batch_bytes") == 1'048'576);
  // One request at a time: one batch each.
  const std::uint64_t batches = uint_field(status, "batches");
  CHECK(batches == kAnswered);
  CHECK(uint_field(status, "batch_failures") == 0);

  simdjson::dom::array sizes;
  REQUIRE(status["batch_sizes"].get_array().get(sizes) == simdjson::SUCCESS);
  std::uint64_t bucketed = 0;
  for (simdjson::dom::element bucket : sizes) bucketed += bucket.get_uint64().value();
  CHECK(bucketed == batches);

  simdjson::dom::array devices;
  REQUIRE(status["devices"].get_array().get(devices) == simdjson::SUCCESS);
  CHECK(devices.size() == kDevices);
  std::uint64_t device_batches = 0;
  for (simdjson::dom::element device : devices) {
    std::string_view state;
    REQUIRE(device["state"].get_string().get(state) == simdjson::SUCCESS);
    CHECK(state == "healthy");
    CHECK(uint_field(device, "batches_failed") == 0);
    CHECK(uint_field(device, "outstanding_requests") == 0);
    device_batches += uint_field(device, "batches_ok");
    // Every batch a device ran taught its cost fit, and so did every probe (a laggard's: a copy
    // of some requests, not counted in batches_ok), but for its cold first runs, which say how a
    // device starts, not how fast it is (daemon/laggard_verdict.hpp).
    simdjson::dom::element cost;
    REQUIRE(device["cost"].get(cost) == simdjson::SUCCESS);
    const std::uint64_t runs = uint_field(device, "batches_ok") + uint_field(device, "probes");
    CHECK(uint_field(cost, "samples") == runs - std::min(runs, LaggardVerdict::kColdBatches));
    bool laggard = true;
    REQUIRE(device["laggard"].get(laggard) == simdjson::SUCCESS);
    double fixed_ns = -1;
    REQUIRE(cost["fixed_ns"].get_double().get(fixed_ns) == simdjson::SUCCESS);
    CHECK(fixed_ns >= 0);
  }
  CHECK(device_batches == batches);
  // Every batch was flushed for one reason, and counted once.
  simdjson::dom::object flushes;
  REQUIRE(status["flushes"].get_object().get(flushes) == simdjson::SUCCESS);
  std::uint64_t flushed = 0;
  for (auto [reason, count] : flushes) flushed += count.get_uint64().value();
  CHECK(flushed == batches);
}

TEST_CASE("batchctl's text report says the same in words") {
  AnsweredDaemon d;
  const test::ProcessOutput run = batchctl({"--socket", d.socket});
  INFO("stdout: ", run.out, "\nstderr: ", run.err);
  REQUIRE(run.exit_code() == 0);
  const std::string pid = std::to_string(d.daemon.pid());
  CHECK(std::regex_search(run.out, std::regex("^backend cpu \\(pid " + pid + "\\), 2 of 2 devices "
                                              "healthy, [12] clients\n")));
  CHECK(std::regex_search(run.out, std::regex("\npolicy: adaptive, batches of up to 48 requests or 1048576 "
                                              "bytes, waiting at most 0.250 ms; now about [0-9]+ requests "
                                              "per batch at [0-9]+ arrivals/s\n")));
  // Why the batches went: each lone request on an idle device, at once (the adaptive target).
  CHECK(std::regex_search(run.out, std::regex("\nflushed: target:20\n")));
  CHECK(run.out.find("\nrequests: 20 taken, 20 ok, 0 failed (0 refused before running), 0 in flight, 0 "
                     "abandoned by their client\n") != std::string::npos);
  CHECK(std::regex_search(run.out, std::regex("\nby class \\(high, normal, low\\): taken 5 / 10 / 5, shed as "
                                              "overloaded 0 / 0 / 0, arriving [0-9]+ / [0-9]+ / [0-9]+ per s\n")));
  // Every batch held one request: the only bucket is [1..1], with all of them.
  CHECK(std::regex_search(run.out, std::regex("\nbatches: ([0-9]+) \\(0 failed\\); sizes: \\[1\\.\\.1\\]:\\1\n")));
  // Each device's line; a batch time in the unit that shows it (a cpu batch takes microseconds:
  // it once read "0.000 ms"), and the cost fit only once there is one.
  const std::regex device_line(
      "\ndevice ([0-9]+): healthy +([0-9]+) batches ok \\(([0-9.]+) % of all\\), 0 failed, 0 timeouts, 0 requests outstanding, batch time "
      "([0-9.]+) (ns|us|ms); (fitted cost [0-9.]+ (ns|us|ms) \\+ [0-9.]+ (ns|us|ms)/request \\+ [0-9.]+ ns/byte|"
      "cost not fitted yet) \\(([0-9]+) batches\\)");
  unsigned lines = 0;
  double shares = 0;
  for (auto it = std::sregex_iterator(run.out.begin(), run.out.end(), device_line); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    CAPTURE(m.str(0));
    ++lines;
    shares += std::stod(m.str(3));
    if (std::stoul(m.str(2)) > 0) CHECK(std::stod(m.str(4)) > 0);
  }
  CHECK(lines == kDevices);
  CHECK(shares == doctest::Approx(100).epsilon(0.01));  // each device's share of the batches
}

TEST_CASE("batchctl and batchd-send without a daemon: exit 1 with the reason on stderr") {
  const std::string missing = test::temp_socket_path("absent.sock");
  const test::ProcessOutput ctl = batchctl({"--socket", missing});
  CHECK(ctl.exit_code() == 1);
  CHECK(ctl.out.empty());
  CHECK(ctl.err.find("batchctl: no batchd daemon at " + missing) != std::string::npos);

  const test::ProcessOutput sent = send({"--socket", missing, "--timeout-ms", "300", "hello"});
  CHECK(sent.exit_code() == 1);
  CHECK(sent.out.empty());
  CHECK(sent.err.find("batchd-send: no batchd daemon at " + missing) != std::string::npos);
}

TEST_CASE("batchd-send prints the answer of the cpu backend, from an argument or stdin") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "0", "--cost", "3",
                                      "--max-input-bytes", "64"});
  for (const std::string input : {"hello", "héllo wörld 🙂", ""}) {
    CAPTURE(input);
    const test::ProcessOutput run = send({"--socket", socket, input});
    INFO("stderr: ", run.err);
    CHECK(run.exit_code() == 0);
    CHECK(run.out == reference_batchstring(input, 3) + "\n");
  }
  // --stdin: all of standard input is the input, newlines included.
  const std::string piped = "piped\nünï\n";
  const test::ProcessOutput from_stdin = send({"--socket", socket, "--stdin"}, piped);
  CHECK(from_stdin.exit_code() == 0);
  CHECK(from_stdin.out == reference_batchstring(piped, 3) + "\n");

  // A request the daemon cannot take: exit 1, the error's name and reason on stderr.
  const test::ProcessOutput too_large = send({"--socket", socket, std::string(65, 'x')});
  CHECK(too_large.exit_code() == 1);
  CHECK(too_large.out.empty());
  CHECK(too_large.err.find("batchd-send: too_large: input of 65 bytes exceeds the daemon's limit of 64") !=
        std::string::npos);
}

// batchd-stress as the benchmarks use it: answers checked against the sim backend or SHA-256 of
// the daemon's cost, wrong ones counted and reflected in the exit status, and an open loop whose
// measured window excludes warm-up and cool-down load; priority classes, one or a mix, reported
// per class; --csv's per-second rows. (Over HTTP: tests/http.)
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"

namespace test = batchd::test;

namespace {

constexpr int kExitFailures = 1;  // batchd-stress: some answers were errors or wrong

}  // namespace

TEST_CASE("--expect-sim checks the sim backend's answers, and catches wrong ones") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--sim-repeat", "2", "--max-wait-ms", "1"});
  const std::vector<std::string> common{"--socket", socket, "--threads", "2", "--requests", "400"};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--expect-sim", "2"});
  const test::StressRun right = test::run_stress(args);
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("ok") == 400);
  CHECK(right.field("wrong") == 0);
  // The daemon repeats twice; expecting once must count every answer wrong, and say so in the
  // exit status that scripts and CI read.
  args = common;
  args.insert(args.end(), {"--expect-sim", "1"});
  const test::StressRun wrong = test::run_stress(args);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("wrong") == 400);
  CHECK(wrong.field("ok") == 0);
}

TEST_CASE("SHA-256 answers of another cost are all counted wrong, and the exit status says so") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cost", "2", "--max-wait-ms", "1"});
  const std::uint64_t requests = test::scaled(400, 50);
  const std::vector<std::string> common{"--socket", socket, "--threads", "2", "--requests",
                                        std::to_string(requests)};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--cost", "2"});
  const test::StressRun right = test::run_stress(args);
  INFO("stderr: ", right.process.err);
  CHECK(right.process.exit_code() == 0);
  CHECK(right.field("sent") == static_cast<double>(requests));
  CHECK(right.field("ok") == static_cast<double>(requests));
  CHECK(right.field("errors") == 0);
  CHECK(right.field("wrong") == 0);

  args = common;
  args.insert(args.end(), {"--cost", "1"});
  const test::StressRun wrong = test::run_stress(args);
  CHECK(wrong.process.exit_code() == kExitFailures);
  CHECK(wrong.field("sent") == static_cast<double>(requests));
  CHECK(wrong.field("wrong") == static_cast<double>(requests));
  CHECK(wrong.field("ok") == 0);
  CHECK(wrong.field("errors") == 0);
}

TEST_CASE("--warmup and --cooldown load runs around the window but only the window is counted") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--max-wait-ms", "1"});
  const test::StressRun out = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate", "1000",
                                                "--duration", "0.5", "--warmup", "0.3", "--cooldown",
                                                "0.2", "--timeout-ms", "5000"});
  REQUIRE(out.process.exit_code() == 0);
  // Exactly the requests whose intended send time falls in the 0.5 s window: 500 at 1,000/s.
  // Both follow from the schedule (intended send times), not from how fast this machine is.
  CHECK(out.field("sent") == doctest::Approx(500).epsilon(0.01));
  CHECK(out.field("ok") == out.field("sent"));
  CHECK(out.field("duration_s") == doctest::Approx(0.5));
  CHECK(out.field("rps") == doctest::Approx(out.field("sent") / out.field("duration_s")));
}

TEST_CASE("--priority and --priority-mix: bad classes and percentages are refused with a clear message") {
  struct Bad {
    std::vector<std::string> args;
    const char* message;
  };
  const std::string socket = test::temp_socket_path("none.sock");  // parsing fails before connecting
  for (const Bad& bad : {
           Bad{{"--priority-mix", "high:10,normal:60"}, "the percentages add up to 70, not 100"},
           Bad{{"--priority-mix", "high:50,normal:60"}, "the percentages add up to 110, not 100"},
           Bad{{"--priority-mix", "urgent:100"}, "unknown class \"urgent\"; the classes are high, normal and low"},
           Bad{{"--priority-mix", "high:ten,normal:90"}, "the percentage of high must be a whole number from 0 to 100"},
           Bad{{"--priority-mix", "high:-5,normal:105"}, "the percentage of high must be a whole number"},
           Bad{{"--priority-mix", "high:50,high:50"}, "high is named twice"},
           Bad{{"--priority-mix", "high"}, "\"high\" is not CLASS:PERCENT"},
           Bad{{"--priority-mix", "normal:100,"}, "\"\" is not CLASS:PERCENT"},
           Bad{{"--priority", "urgent"}, "--priority: \"urgent\" is not a class"},
           Bad{{"--priority", "high", "--priority-mix", "normal:100"}, "excludes"},
       }) {
    std::vector<std::string> args{"--socket", socket, "--requests", "1"};
    args.insert(args.end(), bad.args.begin(), bad.args.end());
    const test::StressRun run = test::run_stress(args, std::chrono::seconds(30));
    INFO("args: ", bad.args.back(), "\nstderr: ", run.process.err);
    CHECK(run.process.exit_code() == 64);
    CHECK(run.process.err.find(bad.message) != std::string::npos);
  }
}

namespace {

// The daemon's per-class counters, read by a client of the test's own.
test::ClassCounts counts_from(const test::StressRun& run) {
  test::ClassCounts sent{};
  for (const batchd::Priority p : {batchd::Priority::kHigh, batchd::Priority::kNormal, batchd::Priority::kLow}) {
    const std::string key = "/by_class/" + std::string(batchd::priority_name(p)) + "/sent";
    sent[static_cast<std::size_t>(p)] = run.has(key) ? static_cast<std::uint64_t>(run.field(key)) : 0;
  }
  return sent;
}

}  // namespace

TEST_CASE("--priority-mix: each class gets its share, reported by_class and taken by the daemon as such") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto watcher = test::connect(socket);
  const std::uint64_t requests = test::scaled(1000, 200);
  const std::vector<std::string> args{"--socket", socket, "--threads", "2", "--requests", std::to_string(requests),
                                      "--seed", "7", "--priority-mix", "high:20,normal:50,low:30"};
  const test::StressRun run = test::run_stress(args);
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("sent") == static_cast<double>(requests));
  const test::ClassCounts sent = counts_from(run);
  CHECK(sent[0] + sent[1] + sent[2] == requests);
  // Drawn per request: near the asked shares (a generous band; the draw is fixed by the seed).
  CHECK(static_cast<double>(sent[0]) == doctest::Approx(0.2 * static_cast<double>(requests)).epsilon(0.35));
  CHECK(static_cast<double>(sent[1]) == doctest::Approx(0.5 * static_cast<double>(requests)).epsilon(0.2));
  CHECK(static_cast<double>(sent[2]) == doctest::Approx(0.3 * static_cast<double>(requests)).epsilon(0.3));
  for (const char* cls : {"high", "normal", "low"}) {
    CAPTURE(cls);
    const std::string at = std::string("/by_class/") + cls;
    CHECK(run.field(at + "/ok") == run.field(at + "/sent"));
    CHECK(run.field(at + "/errors") == 0);
    CHECK(run.field(at + "/wrong") == 0);
    CHECK(run.field(at + "/errors_by_kind/timeout") == 0);
    CHECK(run.field(at + "/latency_samples") == run.field(at + "/sent"));
    CHECK(run.field(at + "/p50_us") > 0);
    CHECK(run.field(at + "/p99_us") >= run.field(at + "/p50_us"));
    CHECK(run.field(at + "/max_us") >= run.field(at + "/p99_us"));
    CHECK(run.field(at + "/max_us") <= run.field("max_us"));
  }
  CHECK(run.process.out.find("\"priority_mix\":\"high:20,normal:50,low:30\"") != std::string::npos);
  CHECK(run.process.out.find("  class high   sent ") != std::string::npos);  // the text report's rows
  // Every request reached the daemon in the class the report says.
  CHECK(test::taken_by_class(*watcher, sent) == sent);
  // The same seed draws the same classes.
  const test::StressRun again = test::run_stress(args);
  CHECK(counts_from(again) == sent);
}

TEST_CASE("--priority: the open loop sends every request in that class, and only it is reported") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto watcher = test::connect(socket);
  const std::uint64_t requests = test::scaled(400, 100);
  const test::StressRun run = test::run_stress({"--socket", socket, "--rate", "2000", "--requests",
                                                std::to_string(requests), "--priority", "low"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("/by_class/low/sent") == static_cast<double>(requests));
  CHECK(run.field("/by_class/low/ok") == static_cast<double>(requests));
  CHECK_FALSE(run.has("/by_class/high"));
  CHECK_FALSE(run.has("/by_class/normal"));
  const test::ClassCounts expected{0, 0, requests};
  CHECK(test::taken_by_class(*watcher, expected) == expected);
}

TEST_CASE("--shape: the open loop follows the rate's segments, and a bad shape is refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5"});
  const std::string csv = test::temp_socket_path("shape.csv");
  // 600/s for a second, then 150/s: the rows' sent counts follow, and every answer is right.
  const test::StressRun run = test::run_stress({"--socket", socket, "--expect-sim", "1", "--shape", "600:1,150:1",
                                                "--duration", "2", "--csv", csv});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("sent") == doctest::Approx(750).epsilon(0.01));
  CHECK(run.field("ok") == run.field("sent"));
  CHECK(run.field("rate") == doctest::Approx(375));
  CHECK(run.process.out.find("open loop shaped 600:1,150:1 (mean 375 req/s)") != std::string::npos);
  std::ifstream in(csv);
  std::string line;
  REQUIRE(std::getline(in, line));
  std::vector<double> sent;
  while (std::getline(in, line)) sent.push_back(std::stod(line.substr(line.find(',') + 1)));
  REQUIRE(sent.size() >= 2);
  CHECK(sent[0] == doctest::Approx(600).epsilon(0.1));
  CHECK(sent[1] == doctest::Approx(150).epsilon(0.1));

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--shape", "600"},
                                              std::vector<std::string>{"--shape", "0:1"},
                                              std::vector<std::string>{"--shape", "600:1", "--rate", "5"},
                                              std::vector<std::string>{"--shape", "600:1", "--threads", "2"}}) {
    std::vector<std::string> args{"--socket", socket, "--duration", "1"};
    args.insert(args.end(), bad.begin(), bad.end());
    const test::StressRun refused = test::run_stress(args, std::chrono::seconds(30));
    INFO("args: ", bad[1], " stderr: ", refused.process.err);
    CHECK(refused.process.exit_code() == 64);
  }
}

TEST_CASE("a burst with more requests in flight than 1,024 is answered, not refused by the client") {
  // 2,000 requests in 20 ms, twice, on devices that take 20 ms a batch: up to 2,000 wait at
  // once, well within their deadlines (about 100 ms to drain). A client's default slots hold
  // them; with the old default of 1,024 half of each burst was refused before it was sent.
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "20000",
                                      "--sim-per-item-us", "10"});
  auto probe = test::connect(socket);
  CHECK(probe->slot_count() >= 2048);
  const test::StressRun run = test::run_stress({"--socket", socket, "--expect-sim", "1", "--shape",
                                                "100000:0.02,0:0.48", "--duration", "1"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("sent") == doctest::Approx(4000).epsilon(0.01));
  CHECK(run.field("ok") == run.field("sent"));
  CHECK(run.field("errors") == 0);
}

TEST_CASE("--csv: one row per second whose counts add up to the summary's, and a bad path refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
                                      "--sim-per-item-us", "5", "--max-wait-ms", "1"});
  const std::string csv = test::temp_socket_path("run.csv");
  const test::StressRun run = test::run_stress({"--socket", socket, "--expect-sim", "1", "--rate", "400",
                                                "--duration", "2.5", "--csv", csv});
  REQUIRE(run.process.exit_code() == 0);
  std::ifstream in(csv);
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(line == "elapsed_s,sent,ok,errors,wrong,p50_us,p99_us");
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream fields(line);
    for (std::string field; std::getline(fields, field, ',');) row.push_back(std::stod(field));
    REQUIRE(row.size() == 7);
    rows.push_back(row);
  }
  // Whole seconds 1 and 2, then the last part-second (connecting and the wait for the last answers
  // make the run a little longer than 2.5 s).
  REQUIRE(rows.size() >= 3);
  CHECK(rows[0][0] == doctest::Approx(1.0));
  CHECK(rows[1][0] == doctest::Approx(2.0));
  double sent = 0, ok = 0;
  for (const auto& row : rows) {
    sent += row[1];
    ok += row[2];
    CHECK(row[3] == 0);
    CHECK(row[4] == 0);
    if (row[2] > 0) {
      CHECK(row[5] > 0);
      CHECK(row[6] >= row[5]);
    }
  }
  CHECK(sent == run.field("sent"));
  CHECK(ok == run.field("ok"));
  // About 400 a second while the load runs.
  CHECK(rows[1][1] == doctest::Approx(400).epsilon(0.2));

  const test::StressRun bad = test::run_stress({"--socket", socket, "--requests", "1", "--csv", "/nonexistent/dir/x.csv"},
                                               std::chrono::seconds(30));
  INFO("stderr: ", bad.process.err);
  CHECK(bad.process.exit_code() == 64);
  CHECK(bad.process.err.find("/nonexistent/dir/x.csv") != std::string::npos);
}

TEST_CASE("--input-file replays real inputs, plain or JSON lines, every answer checked; a bad file is refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  const std::string inputs = test::temp_socket_path("inputs.txt");
  // A plain line, a JSON line with escapes and a newline inside, an empty input, a line that
  // would be JSON if it were not given as a JSON string, and one written on Windows.
  std::ofstream(inputs) << "hello\n"
                        << "{\"input\": \"w\\u00f6rld \\\"quoted\\\"\\nsecond line\"}\n"
                        << "\n"
                        << "{\"input\": \"{not json}\"}\n"
                        << "plain 🙂\r\n";
  const std::uint64_t requests = test::scaled(50, 10);
  const test::StressRun run = test::run_stress({"--socket", socket, "--threads", "2", "--requests",
                                                std::to_string(requests), "--input-file", inputs});
  INFO("stderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("wrong") == 0);

  struct Bad {
    std::string text;
    std::string message;
  };
  for (const Bad& bad : {Bad{"fine\n{\"inputs\": [\"x\"]}\n", ":2: a line starting with '{' must be a JSON object"},
                         Bad{"fine\nalso fine\n\xff\xfe\n", ":3: not valid UTF-8"},
                         Bad{"{\"input\": \"a\", \"output\": \"b\"}\nplain\n", ":2: either every line gives"},
                         Bad{"{\"input\": \"a\", \"output\": \"b\"}\n{\"input\": \"a\", \"output\": \"c\"}\n",
                             ":2: this input's \"output\" differs"},
                         Bad{"", "no inputs in the file"}}) {
    const std::string path = test::temp_socket_path("bad.txt");
    std::ofstream(path) << bad.text;
    const test::StressRun refused = test::run_stress({"--socket", socket, "--requests", "1", "--input-file", path},
                                                     std::chrono::seconds(30));
    INFO("stderr: ", refused.process.err);
    CHECK(refused.process.exit_code() == 64);
    CHECK(refused.process.err.find(bad.message) != std::string::npos);
  }
}

TEST_CASE("--input-file with outputs: answers are checked against the file's, not the reference") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  const std::string right = test::temp_socket_path("right.jsonl");
  std::ofstream(right) << "{\"input\": \"one\", \"output\": \"" << batchd::reference_batchstring("one", 1) << "\"}\n"
                       << "{\"input\": \"two\", \"output\": \"" << batchd::reference_batchstring("two", 1) << "\"}\n";
  const test::StressRun ok = test::run_stress({"--socket", socket, "--threads", "2", "--requests", "40", "--input-file", right});
  INFO("stderr: ", ok.process.err);
  CHECK(ok.process.exit_code() == 0);
  CHECK(ok.field("ok") == 40);
  CHECK(ok.field("wrong") == 0);
  // The file's answer for "two" is not what the daemon answers: every "two" counts wrong.
  const std::string wrong = test::temp_socket_path("wrong.jsonl");
  std::ofstream(wrong) << "{\"input\": \"one\", \"output\": \"" << batchd::reference_batchstring("one", 1) << "\"}\n"
                       << "{\"input\": \"two\", \"output\": \"fr\"}\n";
  const test::StressRun bad = test::run_stress({"--socket", socket, "--threads", "1", "--requests", "40", "--input-file", wrong});
  CHECK(bad.process.exit_code() != 0);
  CHECK(bad.field("ok") == 20);
  CHECK(bad.field("wrong") == 20);
}

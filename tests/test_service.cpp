// The daemon as a service: its config file, flags over the file, a bad file refused by the
// binary, SIGHUP reload without losing a request, and readiness and watchdog notifications to
// the service manager.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "client_lib/client.hpp"
#include "daemon/options.hpp"
#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

int parse(const std::vector<std::string>& args, DaemonOptions& out, std::string& message) {
  return parse_daemon_options(args, out, message);
}

std::chrono::milliseconds time_one(Client& client, const std::string& input) {
  const auto start = std::chrono::steady_clock::now();
  Result r = client.submit(input, 10s);
  REQUIRE(r.ok());
  CHECK(r.output() == reference_batchstring(input, 1));
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

}  // namespace

TEST_CASE("the config file sets options and flags override it") {
  const std::string path = test::write_temp_file("ok.toml",
                                      "max_batch = 32\nmax_wait_ms = 2.5\nbackend = \"sim\"\n"
                                      "[sim]\ndevices = 3\nfail_every = [\"1:5\", \"2:7\"]\n");
  DaemonOptions options;
  std::string message;
  REQUIRE(parse({"--config", path, "--max-batch", "16"}, options, message) == -1);
  CHECK(options.config.batch.max_batch == 16);  // the flag wins
  CHECK(options.config.batch.max_wait == 2500us);
  CHECK(options.config.backend == "sim");
  CHECK(options.config.sim.devices == 3);
  REQUIRE(options.config.sim.fail_every.size() == 2);
  CHECK(options.config.sim.fail_every[1] == std::pair<unsigned, unsigned>{2, 7});
}

// Only an adaptive daemon told no batch size lets the backend raise its ceiling (cuda: to what
// fills a GPU); a size from a flag or the config file, or the fixed rule, is kept as given.
TEST_CASE("the batch ceiling is left to the backend only when no batch size was given") {
  DaemonOptions options;
  std::string message;
  REQUIRE(parse({"--backend", "cpu"}, options, message) == -1);
  CHECK(options.config.batch.max_batch == kAdaptiveDefaultMaxBatch);
  CHECK(options.config.batch.max_batch_from_backend);
  options = {};
  REQUIRE(parse({"--max-batch", "256"}, options, message) == -1);
  CHECK_FALSE(options.config.batch.max_batch_from_backend);
  options = {};
  REQUIRE(parse({"--config", test::write_temp_file("size.toml", "max_batch = 300\n")}, options, message) == -1);
  CHECK(options.config.batch.max_batch == 300);
  CHECK_FALSE(options.config.batch.max_batch_from_backend);
  options = {};
  REQUIRE(parse({"--policy", "fixed"}, options, message) == -1);
  CHECK(options.config.batch.max_batch == kFixedDefaultMaxBatch);
  CHECK_FALSE(options.config.batch.max_batch_from_backend);
}

TEST_CASE("a bad config file is refused with its line and the reason") {
  DaemonOptions options;
  std::string message;
  const std::string unknown = test::write_temp_file("unknown.toml", "max_batch = 8\n\nno_such_key = 1\n");
  CHECK(parse({"--config", unknown}, options, message) == 2);
  CHECK(message.find("line 3") != std::string::npos);
  CHECK(message.find("no-such-key") != std::string::npos);

  const std::string bad_value = test::write_temp_file("value.toml", "max_wait_ms = 1\nmax_batch = 0\n");
  CHECK(parse({"--config", bad_value}, options, message) == 2);
  CHECK(message.find("line 2") != std::string::npos);
  CHECK(message.find("--max-batch") != std::string::npos);

  const std::string syntax = test::write_temp_file("syntax.toml", "max_batch = 8\nmax_wait_ms = = 3\n");
  CHECK(parse({"--config", syntax}, options, message) == 2);
  CHECK(message.find("line 2") != std::string::npos);

  CHECK(parse({"--config", "/nonexistent/batchd.toml"}, options, message) == 2);
  CHECK(parse({"--max-batch", "many"}, options, message) == 2);
}

TEST_CASE("batchd with a bad config file exits 2, naming the file, the line and the reason on stderr") {
  const auto start = [](const std::string& config) {
    const std::string socket = test::temp_socket_path();
    test::ProcessOutput run =
        test::run_captured({test::daemon_binary(), "--config", config, "--socket", socket}, 30s);
    INFO("stdout: ", run.out, "\nstderr: ", run.err);
    CHECK(run.exit_code() == 2);
    CHECK(run.out.empty());
    CHECK_FALSE(std::filesystem::exists(socket));  // it never started serving
    return run.err;
  };
  const std::string unknown = test::write_temp_file("unknown.toml", "max_batch = 8\n\nno_such_key = 1\n");
  CHECK(start(unknown) == unknown + " line 3: unknown key for option --no-such-key\n");

  const std::string bad_value = test::write_temp_file("value.toml", "max_wait_ms = 1\nmax_batch = 0\n");
  const std::string value_error = start(bad_value);
  CHECK(value_error.starts_with(bad_value + " line 2: --max-batch: "));
  CHECK(value_error.find("0 not in range") != std::string::npos);

  const std::string syntax = test::write_temp_file("syntax.toml", "max_batch = 8\nmax_wait_ms = = 3\n");
  const std::string syntax_error = start(syntax);
  CHECK(syntax_error.starts_with(syntax + " line 2: "));
  CHECK(syntax_error.size() > syntax.size() + 10);  // and a reason after the line

  const std::string missing = test::temp_socket_path("missing.toml");
  const std::string missing_error = start(missing);
  CHECK(missing_error.starts_with(missing + ": "));
  CHECK(missing_error.find("could not be opened") != std::string::npos);
  CHECK(missing_error.find("line") == std::string::npos);  // no line to name
}

TEST_CASE("SIGHUP reloads the batching policy without dropping a request; a broken file changes nothing") {
  const std::string config = test::write_temp_file("reload.toml", "policy = \"fixed\"\nmax_wait_ms = 3000\nmax_batch = 40\n");
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--config", config, "--backend", "cpu"});
  auto client = test::connect(socket);
  auto policy = [&] {
    const DaemonStatus s = client->daemon_status();
    return std::pair{s.max_batch, std::chrono::nanoseconds(s.max_wait_ns)};
  };
  CHECK(policy() == std::pair{40U, std::chrono::nanoseconds(3s)});
  CHECK(time_one(*client, "slow window") >= 2500ms);  // a lone request waits out the window

  // Requests waiting in the 3 s window while the policy changes are answered, before it ends.
  const auto submitted = std::chrono::steady_clock::now();
  std::atomic<int> answered{0}, correct{0};
  for (int i = 0; i < 10; ++i) {
    const std::string input = "in flight " + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 10s, [&, input](Result&& r) {
      answered.fetch_add(1);
      if (r.ok() && r.output() == reference_batchstring(input, 1)) correct.fetch_add(1);
    }).has_value());
  }
  std::ofstream(config) << "policy = \"adaptive\"\nmax_wait_ms = 3\nmax_batch = 24\n";
  REQUIRE(::kill(daemon.pid(), SIGHUP) == 0);
  CHECK(test::eventually([&] { client->poll(); return answered.load() == 10; }, 5s));
  CHECK(correct.load() == 10);
  CHECK(test::eventually([&] { return policy() == std::pair{24U, std::chrono::nanoseconds(3ms)}; }, 5s));
  CHECK(client->daemon_status().policy == "adaptive");
  CHECK(std::chrono::steady_clock::now() - submitted < 2500ms);  // the new window let them go
  CHECK(time_one(*client, "fast window") < 2500ms);

  // A broken file on reload keeps the running policy, which differs from the defaults, so a
  // reload that fell back to them would show.
  REQUIRE(policy() != std::pair{static_cast<std::uint32_t>(BatchLimits{}.max_batch), BatchLimits{}.max_wait});
  std::ofstream(config) << "max_wait_ms = [\n";
  REQUIRE(::kill(daemon.pid(), SIGHUP) == 0);
  std::this_thread::sleep_for(500ms);
  CHECK(policy() == std::pair{24U, std::chrono::nanoseconds(3ms)});
  // And the daemon still reloads after it: the broken reload was read, not missed.
  std::ofstream(config) << "max_wait_ms = 4\nmax_batch = 24\n";
  REQUIRE(::kill(daemon.pid(), SIGHUP) == 0);
  CHECK(test::eventually([&] { return policy() == std::pair{24U, std::chrono::nanoseconds(4ms)}; }, 5s));
  CHECK(daemon.stop() == 0);
}

TEST_CASE("the daemon tells the service manager it is ready and pings its watchdog while idle") {
  const std::string notify_path = test::temp_socket_path("notify.sock");
  shm::UniqueFd notify(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(notify.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  timeval tv{0, 200'000};
  ::setsockopt(notify.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

  ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
  ::setenv("WATCHDOG_USEC", "100000", 1);  // pings every 50 ms
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu"});
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");

  // Readiness first, then pings that keep coming with no request to wake the drain loop. How
  // often they come is a matter of scheduling on a loaded machine, so only their order and
  // recurrence are asserted; 3 pings take 150 ms when on time, and 10 s are allowed.
  bool ready = false;
  int pings_after_ready = 0, pings_before_ready = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (pings_after_ready < 3 && std::chrono::steady_clock::now() < until) {
    char buf[512];
    const ssize_t n = ::recv(notify.get(), buf, sizeof(buf) - 1, 0);
    if (n <= 0) continue;
    const std::string message(buf, static_cast<std::size_t>(n));
    const bool ping = message.find("WATCHDOG=1") != std::string::npos;
    if (ping) ++(ready ? pings_after_ready : pings_before_ready);
    ready = ready || message.find("READY=1") != std::string::npos;
  }
  CHECK(ready);
  CHECK(pings_before_ready == 0);
  CHECK(pings_after_ready >= 3);
  CHECK(daemon.stop() == 0);
}

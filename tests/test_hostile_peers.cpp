// Hostile local users, round two: what a peer can do to the daemon through its control socket
// and its share of the lanes, each case beside a normal client whose every answer is checked.
// Whatever the attack, the normal client gets no error and no wrong answer, new clients (of
// another user than the attacker's, where the test may switch users) attach within a second,
// SIGTERM ends the daemon within a second, and its descriptors come back to where they were.
// The latency figures each case prints are measured as ratios in bench/hostile-bench.sh.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "client_lib/attach.hpp"
#include "daemon/cpu_backend.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/clock.hpp"
#include "tests/helpers.hpp"
#include "tests/hostile_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr uid_t kAttackerUid = 65534;  // nobody
// Only root can run an attacker as another user; elsewhere the attacker is the test's own user.
std::optional<test::RunAs> attacker_user() {
  if (::geteuid() != 0) return std::nullopt;
  return test::RunAs{kAttackerUid, kAttackerUid};
}

// Lets another user reach the socket in the tests' private directory.
void open_socket_dir(const std::string& socket) {
  REQUIRE(::chmod(std::filesystem::path(socket).parent_path().c_str(), 0711) == 0);
}

// A batchd-stress run at `rate` requests a second for `seconds`, every answer checked.
struct LoadFigures {
  double ok = 0, errors = 0, wrong = 0, p99_us = 0;
  std::string summary;  // the stress tool's JSON, whose errors_by_kind says what the errors were
};
LoadFigures paced_load(const std::string& socket, unsigned rate, double seconds) {
  const test::StressRun run = test::run_stress(
      {"--socket", socket, "--rate", std::to_string(rate), "--duration", std::to_string(seconds),
       "--timeout-ms", "10000"});
  INFO("stress stderr: ", run.process.err);
  CHECK(run.process.exit_code() == 0);
  return {run.field("ok"), run.field("errors"), run.field("wrong"), run.field("/by_class/normal/p99_us"),
          run.process.out};
}

// The normal client's figures under attack: all answered, none wrong; its p99 beside the same
// client's with no attack, from this run.
void check_normal(const LoadFigures& alone, const LoadFigures& attacked) {
  MESSAGE("normal client: alone p99 ", alone.p99_us, " us; under attack ", attacked.ok, " ok, ",
          attacked.errors, " errors, ", attacked.wrong, " wrong, p99 ", attacked.p99_us, " us (",
          attacked.p99_us / std::max(alone.p99_us, 1.0), "x)");
  INFO("alone: ", alone.summary);
  INFO("under attack: ", attacked.summary);
  CHECK(alone.errors == 0);
  CHECK(attacked.ok > 0);
  CHECK(attacked.errors == 0);
  CHECK(attacked.wrong == 0);
}

// The daemon's resident memory, in KiB.
std::uint64_t rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  FAIL("no VmRSS for pid ", pid);
  return 0;
}

// What an attack may leave the daemon holding: its descriptors come back to where they were,
// and its memory stays within a bound (the sanitizers' allocators keep more).
struct Footprint {
  explicit Footprint(pid_t pid) : pid_(pid), fds_(test::open_fds(pid)), rss_kib_(rss_kib(pid)) {}
  void check_back() const {
    CHECK(test::eventually([&] { return test::open_fds(pid_) <= fds_; }, 5s));
    const std::uint64_t now_kib = rss_kib(pid_);
    MESSAGE("daemon RSS: ", rss_kib_ / 1024, " MiB before the attack, ", now_kib / 1024, " MiB after");
    CHECK(now_kib <= rss_kib_ + static_cast<std::uint64_t>(64 * 1024 * test::slowdown()));
  }

 private:
  pid_t pid_;
  std::size_t fds_;
  std::uint64_t rss_kib_;
};

void check_new_clients(const test::NewClientProber& prober, const std::string& which = "new clients") {
  MESSAGE(which, ": ", prober.in_time(), " of ", prober.tried(), " attached within 1 s (slowest ",
          prober.slowest_ms(), " ms)");
  INFO("the last failure: ", prober.last_failure());
  CHECK(prober.tried() > 0);
  CHECK(prober.in_time() == prober.tried());
}

// The light client (200 requests/s) alone, then beside a closed-loop flood of 64 KiB inputs
// (`extra` flags, run as `as`): the flood ends cleanly and the light client is checked.
void light_client_beside_large_flood(const std::string& socket, const std::vector<std::string>& extra,
                                     std::optional<test::RunAs> as) {
  const LoadFigures alone = paced_load(socket, 200, 2 * test::scale() + 1);
  std::vector<std::string> argv{test::built_binary("BATCHD_STRESS_BIN"), "--socket", socket, "--threads", "2",
                                "--input-file", test::large_inputs_file(socket), "--duration", "5",
                                "--timeout-ms", "10000", "--quiet"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  test::BackgroundRun flooder(argv, as);
  std::this_thread::sleep_for(500ms);
  const LoadFigures attacked = paced_load(socket, 200, 2 * test::scale() + 1);
  const test::ProcessOutput flood = flooder.wait(60s);
  INFO("flood: ", flood.out);
  CHECK(flood.exit_code() == 0);
  check_normal(alone, attacked);
}

// Sends `message` with `fd` attached on `conn`: true if the kernel took it (false: it refused
// descriptors to that socket, SO_PASSRIGHTS).
bool send_fd(int conn, std::span<const std::byte> message, int fd) {
  const int fds[] = {fd};
  const auto sent = shm::send_with_fds(conn, message, fds);
  if (!sent) CHECK(sent.error().code == std::errc::operation_not_permitted);
  return bool(sent);
}

}  // namespace

TEST_CASE("a descriptor whose close lingers stalls nothing, sent attached or before any permission check") {
  for (const bool kernel_refuses : {false, true}) {
    CAPTURE(kernel_refuses);
    DaemonConfig config;
    config.socket_path = test::temp_socket_path();
    config.batch.max_wait = 1ms;
    // Off: the path of kernels before 6.16, where descriptors arrive and the reaper closes them.
    config.refuse_passed_fds = kernel_refuses;
    auto daemon = std::make_unique<test::InProcessDaemon>(config, std::make_unique<CpuBackend>(1, 1));
    const std::string socket = config.socket_path;
    test::NormalLoad load(socket);
    REQUIRE(load.progresses());
    const std::size_t fds_before = test::open_fds(::getpid());
    std::vector<shm::UniqueFd> peers;  // the TCP ends that never read: held to the end
    unsigned delivered = 0;
    {
      test::NewClientProber prober(socket, 200ms, test::grace(1000ms));
      for (int round = 0; round < 3; ++round) {
        // Attached: a junk byte after the hello, carrying a socket that lingers 30 s on close.
        auto attachment = attach_to_daemon(socket, 5s);
        REQUIRE(attachment);
        shm::UniqueFd peer;
        shm::UniqueFd tcp = test::lingering_tcp_socket(peer, 30);
        peers.push_back(std::move(peer));
        const char junk = 'x';
        if (send_fd(attachment->connection.get(), std::as_bytes(std::span(&junk, 1)), tcp.get())) {
          ++delivered;
        } else {
          REQUIRE(::send(attachment->connection.get(), &junk, 1, MSG_NOSIGNAL) == 1);  // junk alone
          test::stop_lingering(tcp.get());  // the test's own close is the last: it must not wait
        }
        tcp.reset();  // the message in flight holds the last reference
        char byte;
        CHECK(test::eventually([&] { return ::recv(attachment->connection.get(), &byte, 1, MSG_DONTWAIT) == 0; }, 5s));
      }
      // Not attached, and not allowed to be (another user, where the test can switch): the hello
      // itself carries one. It is read before any permission check.
      shm::UniqueFd peer;
      shm::UniqueFd tcp = test::lingering_tcp_socket(peer, 30);
      peers.push_back(std::move(peer));
      const test::UnixAddress address(socket);
      open_socket_dir(socket);
      const int tcp_fd = tcp.get();
      test::ChildAttackers stranger(1, attacker_user(), [&](unsigned) {
        const int conn = address.connect();
        const shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion, 0, 0};
        const int fds[] = {tcp_fd};
        if (!shm::send_with_fds(conn, std::as_bytes(std::span(&hello, 1)), fds)) ::_exit(3);
        char reply[sizeof(shm::AttachReply)];
        (void)::recv(conn, reply, sizeof(reply), 0);
        ::_exit(0);
      });
      std::this_thread::sleep_for(1500ms);  // the new-client prober runs meanwhile
      stranger.stop();
      // Where the kernel refused it, the test's own close is the last: it must not wait.
      if (kernel_refuses) test::stop_lingering(tcp.get());
      tcp.reset();
      CHECK(load.progresses());
      prober.stop();
      check_new_clients(prober);
    }
    MESSAGE("descriptors the kernel delivered to the daemon: ", delivered, " of 3");
    CHECK((kernel_refuses || delivered == 3));
    // The TCP ends the test holds are its own; every descriptor the daemon took is closed again.
    CHECK(test::eventually([&] { return test::open_fds(::getpid()) <= fds_before + peers.size(); }, 5s));
    load.check_clean();
    const std::int64_t stop_from_ns = shm::monotonic_ns();
    daemon->stop();
    const double stop_ms = static_cast<double>(shm::monotonic_ns() - stop_from_ns) / 1e6;
    MESSAGE("stop took ", stop_ms, " ms");
    CHECK(stop_ms < static_cast<double>(test::grace(1000ms).count()));
  }
}

TEST_CASE("high priority is the operator's grant: another user's flood claiming it runs at normal") {
  if (::geteuid() != 0) {
    MESSAGE("not root: the flood cannot run as another user, and the test's own user holds the grant");
    return;
  }
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--allow-uid", std::to_string(kAttackerUid)});
  const Footprint footprint(daemon.pid());
  open_socket_dir(socket);
  light_client_beside_large_flood(socket, {"--priority", "high"}, attacker_user());
  auto observer = test::connect(socket);
  const DaemonStatus status = observer->daemon_status();
  MESSAGE("downgraded: ", status.priority_downgrades, "; taken at high: ",
          status.requests_taken_by_class[static_cast<std::size_t>(Priority::kHigh)]);
  CHECK(status.priority_downgrades > 0);
  CHECK(status.requests_taken_by_class[static_cast<std::size_t>(Priority::kHigh)] == 0);
  observer.reset();
  footprint.check_back();
  test::stop_within_bound(daemon, test::grace(1000ms));
}

namespace {

// A daemon serving the normal client at 2,000 requests/s, and new clients attaching every 200 ms,
// while the attack `start_attack` returns runs; checks them all against the same client alone.
// `others_attach`: whether new clients must attach within 1 s (they are another user's than
// the attacker's only where the test can switch users).
void beside_the_normal_client(
    const std::function<std::unique_ptr<test::ChildAttackers>(const test::UnixAddress&)>& start_attack,
    bool others_attach) {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu"});
  const LoadFigures alone = paced_load(socket, 2000, 2 * test::scale() + 1);
  const Footprint footprint(daemon.pid());
  open_socket_dir(socket);
  const test::UnixAddress address(socket);
  LoadFigures attacked;
  {
    const std::unique_ptr<test::ChildAttackers> attack = start_attack(address);
    test::NewClientProber prober(socket, 200ms, test::grace(1000ms));
    // One whose hello comes after its accept: read in a later pass, which must not be spent on
    // the attack's accepts alone.
    test::NewClientProber slow_hello(socket, 200ms, test::grace(1000ms), 50ms);
    attacked = paced_load(socket, 2000, 2 * test::scale() + 1);
    prober.stop();
    slow_hello.stop();
    attack->stop();
    if (others_attach) {
      check_new_clients(prober);
      check_new_clients(slow_hello, "new clients sending their hello 50 ms after connecting");
    } else {
      MESSAGE("not root: the attacker is the test's own user, whose new clients wait for its rate");
    }
  }
  check_normal(alone, attacked);
  footprint.check_back();
  test::stop_within_bound(daemon, test::grace(1000ms));
}

}  // namespace

TEST_CASE("a connect-and-close storm neither starves the drain loop nor keeps others out") {
  beside_the_normal_client(
      [](const test::UnixAddress& address) {
        return std::make_unique<test::ChildAttackers>(2, attacker_user(), [&address](unsigned) {
          for (;;) {
            const int fd = address.connect();
            if (fd >= 0) ::close(fd);
          }
        });
      },
      attacker_user().has_value());
}

TEST_CASE("handshakes held open by twenty users evict only their own, and a newcomer always gets in") {
  const bool root = ::geteuid() == 0;
  beside_the_normal_client(
      [root](const test::UnixAddress& address) {
        // Each user keeps eight connections in the handshake, never sending a hello, and opens a
        // new one whenever the daemon gives up on one.
        return std::make_unique<test::ChildAttackers>(
            20, [root](unsigned i) { return root ? std::optional<test::RunAs>({60001 + i, 60001 + i}) : std::nullopt; },
            [&address](unsigned) {
              pollfd held[8];
              for (pollfd& p : held) p = {address.connect(), POLLIN, 0};
              for (;;) {
                (void)::poll(held, 8, 50);
                for (pollfd& p : held) {
                  if (p.fd >= 0 && p.revents == 0) continue;
                  if (p.fd >= 0) ::close(p.fd);
                  p = {address.connect(), POLLIN, 0};
                }
              }
            });
      },
      root);
}

TEST_CASE("a flood of large inputs cannot hold the lanes: a light client is served between its batches") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu"});
  const Footprint footprint(daemon.pid());
  light_client_beside_large_flood(socket, {}, std::nullopt);
  footprint.check_back();
  test::stop_within_bound(daemon, test::grace(1000ms));
}

// Hostile local clients, built from the project's own attach code: each misbehaves while a
// normal client is loaded, and each must cost only itself. For every case the daemon stays up,
// serves the normal client with no error and no wrong answer throughout, and still stops cleanly
// on SIGTERM (DaemonProcess::stop fails the test otherwise).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "client_lib/attach.hpp"
#include "client_lib/client_segment.hpp"
#include "daemon/cpu_backend.hpp"
#include "daemon/sim_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"
#include "tests/helpers.hpp"
#include "tests/hostile_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;
using test::NormalLoad;
using test::open_fds;
using test::stop_within_bound;

namespace {

// A client that attached with the library's attach code and then does what it likes with its
// segment and descriptors.
struct RawClient {
  std::shared_ptr<client_detail::Segment> seg;

  static RawClient attach(const std::string& socket) {
    auto attachment = attach_to_daemon(socket, 5s);
    REQUIRE(attachment);
    auto seg = client_detail::make_segment(std::move(*attachment), 1);
    REQUIRE(seg);
    RawClient raw;
    raw.seg = std::move(*seg);
    return raw;
  }

  // Writes and publishes a request in `slot` (notify: kNotify* bits; priority and model: the raw
  // words, a WirePriority and a model id or garbage); returns its generation.
  std::uint32_t submit(std::uint32_t slot, std::string_view input, std::int64_t deadline_ns,
                       std::uint32_t notify, std::uint32_t priority = 0, std::uint32_t model = 0) {
    const std::uint32_t generation =
        seg->write_request(slot, input.data(), static_cast<std::uint32_t>(input.size()), deadline_ns,
                           shm::WirePriority::kNormal, client_detail::Use::kAsync);
    seg->view.request_slot(slot)->notify.store(notify);
    seg->view.request_slot(slot)->priority = priority;
    seg->view.request_slot(slot)->model = model;
    REQUIRE(seg->producer.try_push(shm::make_ring_entry(slot, generation)));
    ring();
    return generation;
  }
  void ring() const {
    const std::uint64_t one = 1;
    (void)!::write(seg->doorbell_fd.get(), &one, sizeof(one));
  }
  [[nodiscard]] bool answered(std::uint32_t slot, std::uint32_t generation) const {
    return seg->slot_done(slot, generation);
  }
  // The daemon hung up on this client.
  [[nodiscard]] bool dropped() const {
    char buf[8];
    return ::recv(seg->connection.get(), buf, sizeof(buf), MSG_DONTWAIT) == 0;
  }
};

// A child process that runs body() as uid `uid` and exits with its result.
constexpr uid_t kOtherUid = 65534;  // nobody

}  // namespace

TEST_CASE("a client that clears O_NONBLOCK on its doorbell and races the daemon to read it blocks nobody") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1", "--drain-spin-us", "0"});
  NormalLoad load(socket);
  RawClient hostile = RawClient::attach(socket);
  const int doorbell = hostile.seg->doorbell_fd.get();
  // The doorbell's open file description is shared with the daemon: this changes it for both.
  const int flags = ::fcntl(doorbell, F_GETFL);
  REQUIRE(::fcntl(doorbell, F_SETFL, flags & ~O_NONBLOCK) == 0);
  std::atomic<bool> stop{false};
  std::atomic<int> readers_left{2};
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&] {
      std::uint64_t value = 0;
      while (!stop.load()) (void)!::read(doorbell, &value, sizeof(value));  // blocks when empty
      readers_left.fetch_sub(1);
    });
  }
  // Its own requests, so that the daemon has reason to read the doorbell while the readers race.
  for (std::uint32_t slot = 0; slot < 64; ++slot) {
    hostile.submit(slot, "mine", shm::monotonic_ns() + 10'000'000'000, 0);
  }
  CHECK(load.progresses(200));
  stop.store(true);
  while (readers_left.load() > 0) {  // releases the readers (the daemon may take a ring too)
    hostile.ring();
    std::this_thread::sleep_for(1ms);
  }
  for (auto& t : readers) t.join();
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("the daemon takes no descriptor from a client: an attach that offers one is refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  NormalLoad load(socket);
  // A blocking, saturated eventfd: the v1 protocol signalled such a client-held fd, and a write
  // to it blocked the daemon's worker.
  shm::UniqueFd event(::eventfd(0, EFD_CLOEXEC));
  const std::uint64_t near_max = 0xfffffffffffffffeULL;
  REQUIRE(::write(event.get(), &near_max, sizeof(near_max)) == sizeof(near_max));
  shm::UniqueFd conn = test::raw_connect(socket);
  const int fds[] = {event.get()};
  const shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion, 1U, 0};
  const auto sent = shm::send_with_fds(conn.get(), std::as_bytes(std::span(&hello, 1)), fds);
  if (!sent) {
    // Linux 6.16 and later: the daemon's socket refuses descriptors in the kernel (SO_PASSRIGHTS).
    CHECK(sent.error().code == std::errc::operation_not_permitted);
  } else {
    shm::AttachReply reply{};
    std::vector<shm::UniqueFd> got;
    const auto received = shm::recv_with_fds(conn.get(), std::as_writable_bytes(std::span(&reply, 1)), got);
    REQUIRE(received);
    reply.message[sizeof(reply.message) - 1] = '\0';
    CHECK(reply.status == shm::AttachStatus::kBadHello);
    CHECK(std::string(reply.message).find("fds") != std::string::npos);
  }
  // An event-driven client is served through its own waker instead.
  auto client = test::connect(socket);
  std::atomic<int> answered{0}, correct{0};
  for (int i = 0; i < 200; ++i) {
    const std::string input = "async-" + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 10s, [&, input](Result&& r) {
      answered.fetch_add(1);
      if (r.ok() && r.output() == reference_batchstring(input, 1)) correct.fetch_add(1);
    }).has_value());
  }
  pollfd pfd{client->event_fd(), POLLIN, 0};
  CHECK(test::eventually([&] {
    if (::poll(&pfd, 1, 100) > 0) client->poll();
    return answered.load() == 200;
  }, 10s));
  CHECK(correct.load() == 200);
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("idle connections do not lock anyone out: handshakes have a deadline and do not count as clients") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1", "--max-clients", "4",
                                      "--attach-timeout-ms", "300"});
  std::vector<shm::UniqueFd> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(test::raw_connect(socket));
  // Four clients attach at once, idle connections or not; a fifth is told why it may not.
  NormalLoad load(socket);
  std::vector<std::unique_ptr<Client>> more;
  for (int i = 0; i < 3; ++i) more.push_back(test::connect(socket));
  ClientOptions options;
  options.socket_path = socket;
  Error error;
  CHECK_FALSE(Client::connect(options, &error));
  CHECK(error.code == ErrorCode::kTooManyClients);
  CHECK(error.message.find("maximum of 4 clients") != std::string::npos);
  // The idle ones are closed by their deadline, with a reply that says so.
  std::size_t closed = 0;
  for (auto& fd : idle) {
    pollfd pfd{fd.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 3000) <= 0) continue;
    shm::AttachReply reply{};
    const ssize_t n = ::recv(fd.get(), &reply, sizeof(reply), 0);
    // Past its user's handshake rate, a connection is refused as busy right after accept.
    const bool told = reply.status == shm::AttachStatus::kAttachTimeout || reply.status == shm::AttachStatus::kBusy;
    if (n == static_cast<ssize_t>(sizeof(reply)) && told) ++closed;
  }
  CHECK(closed == idle.size());
  CHECK(load.progresses());
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("one user cannot take every client slot") {
  const std::string socket = test::temp_socket_path();
  std::vector<std::string> args{"--backend", "cpu", "--max-wait-ms", "1", "--max-clients-per-uid", "2",
                                "--allow-uid", std::to_string(kOtherUid)};
  test::DaemonProcess daemon(socket, args);
  NormalLoad load(socket);
  auto second = test::connect(socket);
  ClientOptions options;
  options.socket_path = socket;
  Error error;
  CHECK_FALSE(Client::connect(options, &error));
  CHECK(error.code == ErrorCode::kTooManyClients);
  CHECK(error.message.find("uid " + std::to_string(::geteuid())) != std::string::npos);
  if (::geteuid() == 0) {
    // Another user still gets in (and, not allowed, a third would be refused as such).
    const test::ProcessOutput run = test::send_as(socket, {kOtherUid, kOtherUid}, "from another user");
    INFO("stderr: ", run.err);
    CHECK(run.exit_code() == 0);
    CHECK(run.out == reference_batchstring("from another user", 1) + "\n");
  } else {
    MESSAGE("not root: the second user's attach is not tried (it needs setuid)");
  }
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("a user who may not attach gets a typed refusal, and its flood of attempts cannot flood the log") {
  const std::string socket = test::temp_socket_path();
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  {
    DaemonConfig config;
    config.socket_path = socket;
    config.batch.max_wait = 1ms;
    test::InProcessDaemon daemon(config, std::make_unique<CpuBackend>(1, 1));
    NormalLoad load(socket);
    if (::geteuid() == 0) {
      const test::ProcessOutput run = test::send_as(socket, {kOtherUid, kOtherUid}, "from another user");
      INFO("stdout: ", run.out, "\nstderr: ", run.err);
      CHECK(run.exit_code() == 1);
      CHECK(run.err.find("uid " + std::to_string(kOtherUid) + " may not use this daemon") != std::string::npos);
    } else {
      MESSAGE("not root: the refused user's attach is not tried (it needs setuid)");
    }
    // Two thousand refusals in a burst (malformed hellos: any user can send those), then one
    // more after the bucket refilled, which says how many were held back.
    const auto malformed_hello = [&] {
      shm::UniqueFd conn = test::raw_connect(socket);
      const timeval patience{30, 0};  // a refusal that never comes fails the test, not hangs it
      ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
      const std::uint32_t garbage[4] = {0xdeadbeef, 1, 2, 3};
      (void)shm::send_with_fds(conn.get(), std::as_bytes(std::span(garbage)), {});
      char reply[sizeof(shm::AttachReply)];
      (void)::recv(conn.get(), reply, sizeof(reply), 0);
    };
    for (int i = 0; i < 2000; ++i) malformed_hello();
    std::this_thread::sleep_for(1100ms);
    malformed_hello();
    CHECK(load.progresses());
    load.check_clean();
  }
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  std::size_t lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  MESSAGE("log lines for 2,000 refusals: ", lines);
  // The burst, about one a second after it, and the lines that are no refusal (start and stop).
  CHECK(lines < 2000 / 10);
  CHECK(text.find("more like this suppressed") != std::string::npos);
}

TEST_CASE("a client that sends anything after its hello is dropped, and only it") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  NormalLoad load(socket);
  const std::size_t fds_before = open_fds(daemon.pid());
  for (int round = 0; round < 20; ++round) {
    RawClient hostile = RawClient::attach(socket);
    const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
    REQUIRE(::send(hostile.seg->connection.get(), garbage, sizeof(garbage), MSG_NOSIGNAL) > 0);
    CHECK(test::eventually([&] { return hostile.dropped(); }, 5s));
  }
  CHECK(load.progresses());
  // Every dropped client's descriptors are closed again.
  CHECK(test::eventually([&] { return open_fds(daemon.pid()) <= fds_before; }, 5s));
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("a client that never reads its answers costs only its own slots") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  NormalLoad load(socket);
  RawClient hostile = RawClient::attach(socket);
  const std::uint32_t slots = hostile.seg->view.slot_count();
  std::vector<std::uint32_t> generations(slots);
  // Every slot, asking for every kind of wake-up, and never waiting for or reading one.
  for (std::uint32_t slot = 0; slot < slots; ++slot) {
    generations[slot] = hostile.submit(slot, "unread-" + std::to_string(slot), shm::monotonic_ns() + 30'000'000'000,
                                       shm::kNotifyFutex | shm::kNotifyEventfd);
  }
  hostile.seg->view.event_waiter()->sleeping.store(1);  // claims a sleeping waker that never reads
  CHECK(test::eventually([&] {
    for (std::uint32_t slot = 0; slot < slots; ++slot) {
      if (!hostile.answered(slot, generations[slot])) return false;
    }
    return true;
  }, 20s));
  CHECK(load.progresses());
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("a deadline as far as the clock goes is served, not refused as overloaded") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  auto client = test::connect(socket);
  Result r = client->submit("forever", std::chrono::milliseconds(std::numeric_limits<std::int64_t>::max()));
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  CHECK(r.output() == reference_batchstring("forever", 1));
  RawClient raw = RawClient::attach(socket);
  const std::uint32_t generation = raw.submit(0, "raw forever", std::numeric_limits<std::int64_t>::max(), 0);
  REQUIRE(test::eventually([&] { return raw.answered(0, generation); }, 10s));
  Result direct = raw.seg->read_result(0);
  CHECK(direct.ok());
  stop_within_bound(daemon);
}

TEST_CASE("a withdrawal mark from an earlier generation of a slot never withdraws a later request") {
  // A segment in private memory, laid out as the daemon would.
  const shm::SegmentParams params{4, 64, 256};
  const shm::Geometry g = shm::compute_geometry(params);
  std::vector<std::byte> request(g.request_region_bytes), completion(g.completion_region_bytes);
  client_detail::Segment seg;
  seg.view = shm::SegmentView(g, request.data(), completion.data());
  seg.slots.resize(params.slot_count);
  // Slot 2 was abandoned in generation 7; 2^24 - 1 reuses later its generation is 7 again.
  seg.slots[2].generation = 6;
  seg.view.request_slot(2)->cancel_generation.store(7);
  const std::uint32_t generation =
      seg.write_request(2, "again", 5, 0, shm::WirePriority::kNormal, client_detail::Use::kSync);
  REQUIRE(generation == 7);
  CHECK(seg.view.request_slot(2)->cancel_generation.load() != generation);
  // The wrap itself: the generation after the largest is 1, never 0 (which the daemon refuses).
  seg.slots[1].generation = shm::kGenerationMask;
  CHECK(seg.write_request(1, "x", 1, 0, shm::WirePriority::kNormal, client_detail::Use::kSync) == 1);
}

TEST_CASE("every submission writes its slot's priority: a reused slot keeps nothing of the last class") {
  const shm::SegmentParams params{4, 64, 256};
  const shm::Geometry g = shm::compute_geometry(params);
  std::vector<std::byte> request(g.request_region_bytes), completion(g.completion_region_bytes);
  client_detail::Segment seg;
  seg.view = shm::SegmentView(g, request.data(), completion.data());
  seg.slots.resize(params.slot_count);
  const auto written = [&] { return seg.view.request_slot(3)->priority; };
  (void)seg.write_request(3, "a", 1, 0, shm::WirePriority::kLow, client_detail::Use::kSync);
  CHECK(written() == static_cast<std::uint32_t>(shm::WirePriority::kLow));
  (void)seg.write_request(3, "b", 1, 0, shm::WirePriority::kNormal, client_detail::Use::kAsync);
  CHECK(written() == static_cast<std::uint32_t>(shm::WirePriority::kNormal));
  seg.view.request_slot(3)->priority = 7;  // whatever a crashed writer left there
  seg.view.request_slot(3)->model = 9;
  (void)seg.write_request(3, "c", 1, 0, shm::WirePriority::kHigh, client_detail::Use::kSync);
  CHECK(written() == static_cast<std::uint32_t>(shm::WirePriority::kHigh));
  CHECK(seg.view.request_slot(3)->model == 0);  // the default model, not the last writer's
}

TEST_CASE("a request whose priority is no class (7) drops only its client") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  NormalLoad load(socket);
  const std::size_t fds_before = open_fds(daemon.pid());
  RawClient hostile = RawClient::attach(socket);
  // A well-formed request first, answered as any other; then one in "class 7".
  const std::uint32_t fine = hostile.submit(0, "fine", shm::monotonic_ns() + 10'000'000'000, 0,
                                            static_cast<std::uint32_t>(shm::WirePriority::kLow));
  REQUIRE(test::eventually([&] { return hostile.answered(0, fine); }, 10s));
  CHECK(hostile.seg->read_result(0).output() == reference_batchstring("fine", 1));
  const std::uint32_t garbage = hostile.submit(1, "garbage", shm::monotonic_ns() + 10'000'000'000, 0, 7);
  CHECK(test::eventually([&] { return hostile.dropped(); }, 5s));
  CHECK_FALSE(hostile.answered(1, garbage));  // never taken, so never run
  CHECK(load.progresses());
  CHECK(test::eventually([&] { return open_fds(daemon.pid()) <= fds_before; }, 5s));
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("a request for a model id the daemon does not serve fails alone, with its reason") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "1"});
  NormalLoad load(socket);
  RawClient client = RawClient::attach(socket);
  const std::int64_t deadline = shm::monotonic_ns() + 10'000'000'000;
  for (const std::uint32_t model : {1U, 0xFFFFFFFFU}) {
    CAPTURE(model);
    const std::uint32_t generation = client.submit(0, "which model?", deadline, 0, 0, model);
    REQUIRE(test::eventually([&] { return client.answered(0, generation); }, 10s));
    const Result result = client.seg->read_result(0);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == ErrorCode::kUnknownModel);
    CHECK(result.error().message.find("unknown model id " + std::to_string(model)) != std::string::npos);
  }
  // The client stays: its next request, for the default model, is answered.
  const std::uint32_t fine = client.submit(1, "fine", deadline, 0);
  REQUIRE(test::eventually([&] { return client.answered(1, fine); }, 10s));
  CHECK(client.seg->read_result(1).output() == reference_batchstring("fine", 1));
  CHECK_FALSE(client.dropped());
  CHECK(load.progresses());
  load.check_clean();
  stop_within_bound(daemon);
}

TEST_CASE("batch byte budgets that 32-bit offsets cannot address are refused at start") {
  const int status = test::run_to_exit({test::daemon_binary(), "--socket", test::temp_socket_path(),
                                        "--max-batch-bytes", std::to_string(std::uint64_t{1} << 33)},
                                       10s);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  DaemonConfig config;
  config.socket_path = test::temp_socket_path();
  config.batch.max_batch_bytes = std::uint64_t{1} << 32;
  Daemon direct(config, std::make_unique<CpuBackend>(1, 1));
  CHECK_THROWS_WITH_AS(direct.start(), doctest::Contains("must not exceed"), std::invalid_argument);
}

TEST_CASE("--max-clients that the open-file limit cannot hold fails at start, not at the 250th client") {
  auto run_limited = [](rlim_t limit, const std::string& max_clients) {
    std::string socket = test::temp_socket_path();
    std::string bin = test::daemon_binary();
    std::string clients = max_clients;
    char* argv[] = {bin.data(), const_cast<char*>("--socket"), socket.data(),
                    const_cast<char*>("--max-clients"), clients.data(),
                    const_cast<char*>("--log-level"), const_cast<char*>("error"), nullptr};
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // only system calls here: the child never returns into the test runner
      const rlimit lim{limit, limit};
      if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(100);
      ::execv(argv[0], argv);
      ::_exit(101);
    }
    // A daemon that starts is told to stop once it listens; one that cannot start exits alone.
    int status = 0;
    const bool exited_alone = test::eventually([&] {
      return ::waitpid(pid, &status, WNOHANG) == pid;
    }, 3s);
    if (!exited_alone) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, &status, 0);
    }
    return std::make_pair(exited_alone, status);
  };
  auto [refused, refused_status] = run_limited(256, "256");
  CHECK(refused);
  CHECK((WIFEXITED(refused_status) && WEXITSTATUS(refused_status) == 1));
  auto [stopped, ok_status] = run_limited(256, "16");  // 16 x 4 + 128 handshakes + 64 = 256
  CHECK_FALSE(stopped);  // it ran until told to stop
  CHECK((WIFEXITED(ok_status) && WEXITSTATUS(ok_status) == 0));
}

TEST_CASE("one client's flood does not hold back another's request, and a gone client's queue is dropped") {
  DaemonConfig config;
  config.socket_path = test::temp_socket_path();
  config.batch.max_batch = 16;
  config.batch.max_wait = 1ms;
  config.routing.spare_batches = 0;
  config.segment.slot_count = 1024;
  SimOptions sim;
  sim.devices = 1;
  sim.fixed_us = 5'000;  // 16 requests per 5 ms: a full ring of 1,024 takes about 320 ms
  sim.per_item_us = 0;
  test::InProcessDaemon daemon(config, std::make_unique<SimBackend>(sim));
  auto heavy = test::connect(config.socket_path);
  auto light = test::connect(config.socket_path);
  std::atomic<int> heavy_done{0};
  const int flood = static_cast<int>(heavy->slot_count());
  for (int i = 0; i < flood; ++i) {
    REQUIRE_FALSE(heavy->submit_async("heavy-" + std::to_string(i), 30s,
                                      [&](Result&&) { heavy_done.fetch_add(1); }).has_value());
  }
  REQUIRE(test::eventually([&] { return daemon.stats().requests_taken.load() >= 512; }, 10s));
  std::atomic<bool> polling{true};
  std::thread poller([&] {
    while (polling.load()) {
      heavy->poll();
      std::this_thread::sleep_for(1ms);
    }
  });
  Result r = light->submit("light", 30s);
  const int heavy_before_light = heavy_done.load();
  REQUIRE(r.ok());
  MESSAGE("heavy requests answered before the light one: ", heavy_before_light, " of ", flood);
  // In arrival order it would wait for the whole flood ahead of it; round-robin puts it in one
  // of the next batches.
  CHECK(heavy_before_light < flood / 2);
  polling.store(false);
  poller.join();
  // The heavy client goes with most of its flood still waiting: that is dropped, not run.
  heavy.reset();
  CHECK(test::eventually([&] { return daemon.stats().requests_abandoned.load() > 0; }, 5s));
  CHECK(test::eventually([&] { return daemon.stats().in_flight() == 0; }, 10s));
  CHECK(light->submit("after", 10s).ok());
}

// The daemon's latency histograms and its own /metrics listener: which bucket a duration counts
// in, what the listener answers, that a scraper who says nothing holds up no one, and that the cpu
// backend's batch time and histograms show once its load has stopped.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "status/metrics_listener.hpp"
#include "daemon/stats.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

shm::UniqueFd connect_local(std::uint16_t port) {
  shm::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Everything the peer sends until it closes, or what came before `timeout`.
std::string read_to_close(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return out;
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string exchange(std::uint16_t port, const std::string& request) {
  shm::UniqueFd fd = connect_local(port);
  REQUIRE(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  return read_to_close(fd.get(), test::grace(5000ms));
}

MetricsListener listener_on_any_port() {
  return MetricsListener(parse_listen_address("127.0.0.1:0", "--metrics-listen").value(),
                         [] { return std::string("batchd_test_up 1\n"); });
}

}  // namespace

TEST_CASE("a duration counts in the first bucket whose bound it does not exceed") {
  CHECK(LatencyHistogram::bucket_of(0) == 0);
  CHECK(LatencyHistogram::bucket_of(shm::kLatencyBoundsNs[0]) == 0);
  CHECK(LatencyHistogram::bucket_of(shm::kLatencyBoundsNs[0] + 1) == 1);
  CHECK(LatencyHistogram::bucket_of(1'000'000) == 6);  // 1 ms: le="0.001"
  CHECK(shm::kLatencyBoundsNs[6] == 1'000'000);
  CHECK(LatencyHistogram::bucket_of(10'000'000'000) == shm::kLatencyBuckets - 2);
  CHECK(LatencyHistogram::bucket_of(10'000'000'001) == shm::kLatencyBuckets - 1);  // +Inf
  LatencyHistogram h;
  h.record(-5);  // two threads' clocks: counted as 0, not as a huge unsigned sum
  h.record(30'000);
  CHECK(h.buckets[0].load() == 1);
  CHECK(h.buckets[2].load() == 1);
  CHECK(h.sum_ns.load() == 30'000);
}

TEST_CASE("the metrics listener answers GET and HEAD /metrics, 404, 405, 431 and 400") {
  MetricsListener listener = listener_on_any_port();
  listener.start();
  REQUIRE(listener.port() != 0);
  const std::string ok = exchange(listener.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(ok.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(ok.ends_with("\r\n\r\nbatchd_test_up 1\n"));
  const std::string head = exchange(listener.port(), "HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
  CHECK(head.starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(head.find("Content-Length: 17\r\n") != std::string::npos);
  CHECK(head.ends_with("\r\n\r\n"));
  CHECK(exchange(listener.port(), "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
  const std::string post = exchange(listener.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  CHECK(post.starts_with("HTTP/1.1 405 "));
  CHECK(post.find("Allow: GET, HEAD\r\n") != std::string::npos);
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(MetricsListener::kMaxRequestBytes, 'a') + "\r\n\r\n";
  CHECK(exchange(listener.port(), huge).starts_with("HTTP/1.1 431 "));
  CHECK(exchange(listener.port(), "NOT HTTP AT ALL\r\n\r\n").starts_with("HTTP/1.1 400 "));
}

TEST_CASE("scrapers that say nothing are cut off at the deadline and hold up no one meanwhile") {
  MetricsListener listener = listener_on_any_port();
  listener.start();
  std::vector<shm::UniqueFd> silent;
  for (unsigned i = 0; i < MetricsListener::kMaxConnections; ++i) silent.push_back(connect_local(listener.port()));
  // Every slot is held: one more is closed at once rather than queued behind them.
  shm::UniqueFd extra = connect_local(listener.port());
  CHECK(read_to_close(extra.get(), test::grace(1000ms)).empty());
  // Each silent one is closed by its deadline (2 s), not left open.
  const auto started = std::chrono::steady_clock::now();
  for (const shm::UniqueFd& fd : silent) CHECK(read_to_close(fd.get(), test::grace(10'000ms)).empty());
  CHECK(std::chrono::steady_clock::now() - started < test::grace(10'000ms));
  // And the listener serves again.
  CHECK(exchange(listener.port(), "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 "));
}

TEST_CASE("the cpu backend's batch time and histograms show, and stay shown once the load stops") {
  const std::string path = test::temp_socket_path();
  test::DaemonProcess daemon(path, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "0"});
  auto client = test::connect(path);
  const int requests = 50;
  for (int i = 0; i < requests; ++i) {
    const Result r = client->submit("cpu batch " + std::to_string(i), 5s, i % 2 == 0 ? Priority::kHigh : Priority::kLow);
    REQUIRE(r.ok());
  }
  const auto answered = [&](const DaemonStatus& s) {
    return s.queue_time_by_class[static_cast<std::size_t>(Priority::kHigh)].count() +
           s.queue_time_by_class[static_cast<std::size_t>(Priority::kLow)].count();
  };
  REQUIRE(test::eventually([&] { return answered(client->daemon_status()) == requests; }, 10s));
  // The router's estimate goes stale after DeviceHealth::kStaleNs without a batch; what batchctl
  // and /metrics show must not drop to 0 with it.
  std::this_thread::sleep_for(1500ms);
  const DaemonStatus status = client->daemon_status();
  REQUIRE(status.latency_bounds_ns.size() == shm::kLatencyBuckets - 1);
  CHECK(status.queue_time_by_class[static_cast<std::size_t>(Priority::kHigh)].count() == requests / 2);
  CHECK(status.queue_time_by_class[static_cast<std::size_t>(Priority::kNormal)].count() == 0);
  REQUIRE(status.devices.size() == 1);
  CHECK(status.devices[0].batch_ns > 0);
  CHECK(status.devices[0].compute_time.count() == status.devices[0].batches_ok);
  CHECK(status.devices[0].compute_time.sum_ns > 0);
}

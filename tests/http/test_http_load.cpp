// Many keep-alive connections at once, half of them pipelining 16 requests at a time, every answer
// checked against the reference SHA-256. A few threads drive all connections through epoll.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <deque>
#include <memory>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

namespace beast_http = boost::beast::http;

constexpr unsigned kPipelineDepth = 16;

struct Tally {
  std::uint64_t ok = 0, wrong = 0, failed = 0;
  std::string first_problem;

  void problem(std::string what) {
    if (first_problem.empty()) first_problem = std::move(what);
  }
};

// One client connection: sends a burst (1 or 16 requests), reads as many answers in order, repeats.
struct LoadConn {
  int fd = -1;
  unsigned id = 0;
  unsigned depth = 1;
  bool text = false;  // text/plain instead of JSON
  std::uint64_t total = 0, sent = 0, answered = 0;
  std::deque<std::string> expected;
  std::string out, in;
  std::size_t out_offset = 0;
  std::unique_ptr<beast_http::response_parser<beast_http::string_body>> parser;  // Beast's parser cannot move
  std::mt19937_64 rng;
  bool done = false;

  void fill() {
    for (unsigned i = 0; i < depth && sent < total; ++i, ++sent) {
      const std::string input = "c" + std::to_string(id) + "." + std::to_string(sent) + " " +
                                random_utf8(rng, rng() % 96);
      if (text) {
        out += make_request("POST", "/v1/batchstring", input, {"Content-Type: text/plain"});
        expected.push_back(reference_batchstring(input, 1));
      } else {
        out += batch_request(input);
        expected.push_back(expected_json_output(input));
      }
    }
  }

  // Writes what it can; false if the connection broke.
  bool flush() {
    while (out_offset < out.size()) {
      const ssize_t n = ::send(fd, out.data() + out_offset, out.size() - out_offset, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) return false;
      out_offset += static_cast<std::size_t>(n);
    }
    out.clear();
    out_offset = 0;
    return true;
  }

  // Parses whole responses out of `in`; checks each against the next expected body.
  void parse(Tally& tally) {
    while (!in.empty() && !done) {
      if (!parser) {
        parser = std::make_unique<beast_http::response_parser<beast_http::string_body>>();
        parser->eager(true);
      }
      boost::system::error_code ec;
      const std::size_t used = parser->put(boost::asio::buffer(in.data(), in.size()), ec);
      in.erase(0, used);
      if (ec == beast_http::error::need_more) return;
      if (ec) {
        tally.problem("unparsable response: " + ec.message());
        done = true;
        return;
      }
      if (!parser->is_done()) return;
      check(parser->release(), tally);
      parser.reset();
    }
  }

  void check(const beast_http::response<beast_http::string_body>& response, Tally& tally) {
    const std::string want = std::move(expected.front());
    expected.pop_front();
    ++answered;
    if (response.result_int() != 200) {
      ++tally.failed;
      tally.problem("status " + std::to_string(response.result_int()) + ": " + response.body());
    } else if (response.body() != want) {
      ++tally.wrong;
      tally.problem("wrong answer on connection " + std::to_string(id));
    } else {
      ++tally.ok;
    }
    if (expected.empty()) {
      if (answered == total) {
        done = true;
      } else {
        fill();
      }
    }
  }
};

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Drives `conns` to completion with one epoll; returns what it saw.
Tally drive(std::vector<LoadConn>& conns, std::chrono::seconds limit) {
  Tally tally;
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  std::size_t remaining = conns.size();
  for (std::size_t i = 0; i < conns.size(); ++i) {
    epoll_event ev{EPOLLIN | EPOLLOUT | EPOLLET, {.u64 = i}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
    conns[i].fill();
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  epoll_event events[64];
  while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
    const int n = ::epoll_wait(ep, events, 64, 100);
    for (int e = 0; e < n; ++e) {
      LoadConn& c = conns[events[e].data.u64];
      if (c.done) continue;
      bool alive = c.flush();
      char chunk[65536];
      for (ssize_t got = 0; alive && (got = ::recv(c.fd, chunk, sizeof(chunk), MSG_DONTWAIT)) != 0;) {
        if (got < 0) {
          alive = errno == EAGAIN || errno == EINTR;
          break;
        }
        c.in.append(chunk, static_cast<std::size_t>(got));
        c.parse(tally);
      }
      alive = alive && c.flush();
      if (!alive && !c.done) {
        tally.problem("connection " + std::to_string(c.id) + " broke after " + std::to_string(c.answered) + " answers");
        c.done = true;
      }
      if (c.done) --remaining;
    }
  }
  tally.failed += remaining;  // connections that did not finish in time
  if (remaining > 0) tally.problem(std::to_string(remaining) + " connections did not finish in time");
  ::close(ep);
  return tally;
}

// `connections` keep-alive connections × `per_connection` requests over `threads` threads.
Tally run_load(std::uint16_t port, unsigned connections, std::uint64_t per_connection, unsigned threads) {
  std::vector<std::vector<LoadConn>> groups(threads);
  for (unsigned i = 0; i < connections; ++i) {
    LoadConn c;
    c.id = i;
    c.fd = connect_to(port);
    REQUIRE(c.fd >= 0);
    c.depth = i % 2 == 0 ? kPipelineDepth : 1;
    c.text = i % 4 == 3;
    c.total = per_connection;
    c.rng.seed(i);
    groups[i % threads].push_back(std::move(c));
  }
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] { tallies[t] = drive(groups[t], std::chrono::seconds(240)); });
  }
  for (auto& w : workers) w.join();
  Tally total;
  for (auto& group : groups) {
    for (auto& c : group) ::close(c.fd);
  }
  for (auto& t : tallies) {
    total.ok += t.ok;
    total.wrong += t.wrong;
    total.failed += t.failed;
    if (total.first_problem.empty()) total.first_problem = t.first_problem;
  }
  return total;
}

}  // namespace

TEST_CASE("200 keep-alive connections x 1000 requests, half pipelined 16 deep, every answer verified") {
  for (const std::string mode : {"auto", "basic"}) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    DaemonProcess daemon(socket, {"--max-wait-ms", "2", "--slots-per-client", "4096"});
    FrontendProcess frontend(socket, {"--io-mode", mode, "--workers", "2"});
    constexpr unsigned kConnections = 200;
    const std::uint64_t per_connection = scaled(1000, 20);
    const auto start = std::chrono::steady_clock::now();
    const Tally tally = run_load(frontend.port(), kConnections, per_connection, 4);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(mode << ": " << tally.ok << " answers in " << seconds << " s ("
                 << static_cast<double>(tally.ok) / seconds << " requests/s)");
    CAPTURE(tally.first_problem);
    CHECK(tally.wrong == 0);
    CHECK(tally.failed == 0);
    CHECK(tally.ok == kConnections * per_connection);
    CHECK(frontend.stop() == 0);
  }
}

// Connections over time: slow and stalled clients, callers that leave early, pipelining past the
// per-connection limit, the connection limit, and SIGTERM with requests in flight.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kModes = {"auto", "basic"};

// The value of an unlabelled metric from /metrics; nullopt when the call fails or the metric is
// absent, so a check on it cannot pass by accident.
std::optional<double> metric(std::uint16_t port, const std::string& name) {
  HttpClient client(port);
  auto r = client.round_trip(make_request("GET", "/metrics"));
  if (!r || r->status != 200) return std::nullopt;
  const auto at = r->body.find("\n" + name + " ");
  if (at == std::string::npos) return std::nullopt;
  const std::size_t from = at + 1 + name.size() + 1;
  const std::string value = r->body.substr(from, r->body.find('\n', from) - from);
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size()) return std::nullopt;
  return parsed;
}

}  // namespace

TEST_CASE("slowloris: a header trickling in is cut off at --header-timeout-ms while others are served") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    DaemonProcess daemon(socket, {"--max-wait-ms", "1"});
    FrontendProcess frontend(socket, {"--io-mode", mode, "--workers", "1", "--header-timeout-ms", "500"});
    HttpClient slow(frontend.port());
    const std::string request = batch_request("never");
    std::atomic<bool> closed{false};
    const auto start = std::chrono::steady_clock::now();
    std::thread trickler([&] {
      for (std::size_t i = 0; i < request.size() && !closed.load(); ++i) {
        if (!slow.send(request.substr(i, 1))) break;
        std::this_thread::sleep_for(100ms);
      }
    });
    // Meanwhile the same (only) worker keeps serving everyone else.
    for (int i = 0; i < 5; ++i) {
      HttpClient other(frontend.port());
      auto r = other.round_trip(batch_request("other" + std::to_string(i)));
      REQUIRE(r.has_value());
      CHECK(r->status == 200);
    }
    auto cut = slow.read_response();
    const bool was_closed = slow.wait_closed(5s);
    closed = true;
    trickler.join();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    REQUIRE(cut.has_value());
    CHECK(cut->status == 408);
    CHECK(error_code_of(cut->body) == "request_timeout");
    CHECK(was_closed);
    CHECK(elapsed < 1500ms + test::grace(2500ms));  // 0.5 s to the cut, up to 1 s of lingering, and slack
  }
}

TEST_CASE("a stalled body gets 408, and a quiet keep-alive connection is closed after --idle-timeout-ms") {
  const std::string socket = temp_socket_path();
  DaemonProcess daemon(socket, {"--max-wait-ms", "1"});
  FrontendProcess frontend(socket, {"--body-timeout-ms", "400", "--idle-timeout-ms", "400"});
  HttpClient stalled(frontend.port());
  REQUIRE(stalled.send("POST /v1/batchstring HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"input\":"));
  auto r = stalled.read_response();
  REQUIRE(r.has_value());
  CHECK(r->status == 408);
  HttpClient idle(frontend.port());
  REQUIRE(idle.round_trip(make_request("GET", "/healthz")).has_value());
  const auto start = std::chrono::steady_clock::now();
  CHECK(idle.wait_closed(5s));
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
}

TEST_CASE("callers that disconnect before their answer cost nothing else") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    // Batches take 50 ms, so every answer arrives after its caller has gone.
    DaemonProcess daemon(socket, {"--backend", "sim", "--sim-fixed-us", "50000", "--max-wait-ms", "1"});
    FrontendProcess frontend(socket, {"--io-mode", mode, "--workers", "2"});
    for (int i = 0; i < 100; ++i) {
      HttpClient leaver(frontend.port());
      std::string burst = batch_request("leave" + std::to_string(i)) + batch_request("twice");
      REQUIRE(leaver.send(burst));
      if (i % 2 == 0) {
        std::this_thread::sleep_for(5ms);  // read and submitted by now; its answer is 50 ms away
        leaver.reset();  // RST
      } else {
        leaver.close();  // FIN
      }
    }
    {  // still serving
      HttpClient client(frontend.port());
      auto r = client.round_trip(batch_request("still here"));
      REQUIRE(r.has_value());
      CHECK(r->status == 200);
    }
    // Every answer came back and was dropped (or written to a closed socket), nothing leaked.
    CHECK(eventually([&] { return metric(frontend.port(), "batchd_http_requests_in_flight") == 0.0; }, 10s));
    CHECK(eventually([&] { return metric(frontend.port(), "batchd_http_connections_open") == 1.0; },
                     10s));  // the metrics call itself
    const std::optional<double> dropped = metric(frontend.port(), "batchd_http_answers_dropped_total");
    REQUIRE(dropped.has_value());
    CHECK(*dropped > 0);
    CHECK(frontend.stop() == 0);
  }
}

TEST_CASE("pipelining past --max-pipelined pauses reading and resumes; every answer arrives in order") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    DaemonProcess daemon(socket, {"--max-wait-ms", "1"});
    FrontendProcess frontend(socket, {"--io-mode", mode, "--max-pipelined", "4"});
    HttpClient client(frontend.port());
    constexpr int kRequests = 300;
    std::string burst;
    for (int i = 0; i < kRequests; ++i) burst += batch_request("p" + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'z'));
    std::thread writer([&] { client.send(burst); });
    int right = 0;
    for (int i = 0; i < kRequests; ++i) {
      auto r = client.read_response();
      if (!r) break;
      if (r->status == 200 && r->body == expected_json_output("p" + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'z'))) ++right;
    }
    writer.join();
    CHECK(right == kRequests);
  }
}

TEST_CASE("--max-connections: the connection over the limit gets 503 too_many_connections") {
  const std::string socket = temp_socket_path();
  DaemonProcess daemon(socket, {"--max-wait-ms", "1"});
  FrontendProcess frontend(socket, {"--max-connections", "3", "--workers", "2"});
  // Three connections the server holds open. A connection still counts until the server has seen
  // it close: one of wait_ready's /readyz polls may still be counted when the third comes, which
  // is then refused; it is tried again, and each held one must have been served.
  std::vector<std::unique_ptr<HttpClient>> held;
  REQUIRE(eventually([&] {
    auto client = std::make_unique<HttpClient>(frontend.port());
    auto r = client->round_trip(make_request("GET", "/healthz"));
    REQUIRE(r.has_value());
    if (r->status == 503) return false;
    CHECK(r->status == 200);
    held.push_back(std::move(client));
    return held.size() == 3;
  }, 5s));
  HttpClient extra(frontend.port());
  auto r = extra.read_response();
  REQUIRE(r.has_value());
  CHECK(r->status == 503);
  CHECK(error_code_of(r->body) == "too_many_connections");
  held.pop_back();
  CHECK(eventually([&] {
    try {
      HttpClient again(frontend.port());
      auto ok = again.round_trip(make_request("GET", "/healthz"));
      return ok && ok->status == 200;
    } catch (const std::exception&) {
      return false;
    }
  }, 5s));
}

TEST_CASE("SIGTERM: no new connections, requests in flight get their answers, exit 0") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    DaemonProcess daemon(socket, {"--backend", "sim", "--sim-fixed-us", "300000", "--max-wait-ms", "1", "--cost", "1"});
    FrontendProcess frontend(socket, {"--io-mode", mode, "--workers", "2"});
    std::vector<std::unique_ptr<HttpClient>> callers;
    for (int i = 0; i < 8; ++i) {
      callers.push_back(std::make_unique<HttpClient>(frontend.port()));
      REQUIRE(callers.back()->send(batch_request("inflight" + std::to_string(i)) + batch_request("second")));
    }
    std::this_thread::sleep_for(100ms);  // the requests are parsed and submitted
    frontend.signal(SIGTERM);
    int answered = 0;
    for (auto& caller : callers) {
      for (int k = 0; k < 2; ++k) {
        auto r = caller->read_response();
        if (r && r->status == 200) ++answered;
      }
      CHECK(caller->wait_closed(5s));
    }
    CHECK(answered == 16);
    const int status = frontend.wait_exit(10s);
    REQUIRE(status != -1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK_THROWS(HttpClient(frontend.port(), 1s));
  }
}

// Every status batchd-http answers with, end to end: the batchd binary, the batchd-http binary and
// real HTTP over TCP, in both io modes (multishot io_uring, and the basic fallback).
#include <doctest/doctest.h>

#include "backend/reference_batchstring.hpp"
#include "tests/http/http_test_support.hpp"

using namespace batchd;
using namespace batchd::test;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kModes = {"auto", "basic"};

// A cpu daemon (inputs up to 1 KiB) and a front-end with small limits, in one io mode.
struct Stack {
  explicit Stack(const std::string& mode, std::vector<std::string> frontend_args = {},
                 std::vector<std::string> daemon_args = {"--max-wait-ms", "1", "--max-input-bytes", "1024"})
      : socket(temp_socket_path()), daemon(socket, daemon_args), frontend(socket, with_mode(mode, frontend_args)) {}

  static std::vector<std::string> with_mode(const std::string& mode, std::vector<std::string> args) {
    std::vector<std::string> all{"--io-mode", mode, "--workers", "2", "--max-body-bytes", "4096",
                                 "--max-header-bytes", "2048", "--timeout-ms", "3000"};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }

  HttpResponse call(const std::string& request, bool head = false) const {
    HttpClient client(frontend.port());
    auto response = client.round_trip(request, head);
    REQUIRE(response.has_value());
    return *response;
  }

  std::string socket;
  DaemonProcess daemon;
  FrontendProcess frontend;
};

}  // namespace

TEST_CASE("200: JSON and plain-text answers, several on one keep-alive connection") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    Stack stack(mode);
    HttpClient client(stack.frontend.port());
    for (const std::string input : {"hello", "", "tab\tquote\"é🙂", "line\nbreak"}) {
      auto r = client.round_trip(batch_request(input));
      REQUIRE(r.has_value());
      CHECK(r->status == 200);
      CHECK(r->body == expected_json_output(input));
      CHECK(r->keep_alive);
    }
    auto text = client.round_trip(make_request("POST", "/v1/batchstring", "hello", {"Content-Type: text/plain"}));
    REQUIRE(text.has_value());
    CHECK(text->status == 200);
    CHECK(text->header("content-type") == "text/plain; charset=utf-8");
    CHECK(text->body == reference_batchstring("hello", 1));
  }
}

TEST_CASE("400: malformed JSON, missing or wrong field, invalid UTF-8, bad timeout header") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    Stack stack(mode);
    check_error(stack.call(make_request("POST", "/v1/batchstring", "{\"input\": ")), 400, "invalid_json");
    check_error(stack.call(make_request("POST", "/v1/batchstring", R"({"text":"x"})")), 400, "missing_field");
    check_error(stack.call(make_request("POST", "/v1/batchstring", R"({"input":42})")), 400, "bad_request");
    check_error(stack.call(make_request("POST", "/v1/batchstring", R"("input")")), 400, "bad_request");
    check_error(stack.call(batch_request("bad \xC0\xAF utf8")), 400, "invalid_utf8");
    check_error(stack.call(make_request("POST", "/v1/batchstring", "\xED\xA0\x80", {"Content-Type: text/plain"})), 400,
                "invalid_utf8");
    check_error(stack.call(batch_request("x", {"X-Timeout-Ms: -5"})), 400, "bad_timeout");
    check_error(stack.call("NOT HTTP AT ALL\r\n\r\n"), 400, "bad_request");
  }
}

TEST_CASE("413 body or input too large, 431 header too large, 404, 405") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    Stack stack(mode);
    check_error(stack.call(batch_request(std::string(5000, 'a'))), 413, "too_large");  // over --max-body-bytes
    check_error(stack.call(batch_request(std::string(2000, 'a'))), 413, "too_large");  // over the daemon's input
    check_error(stack.call(make_request("GET", "/healthz", {}, {"X-Pad: " + std::string(3000, 'p')})), 431,
                "header_too_large");
    check_error(stack.call(make_request("GET", "/v3/other")), 404, "not_found");
    // Below /v2 the Open Inference Protocol answers, with its own error body.
    const HttpResponse v2_unknown = stack.call(make_request("GET", "/v2/other"));
    CHECK(v2_unknown.status == 404);
    CHECK(v2_unknown.body.starts_with(R"({"error":"no such resource: /v2/other)"));
    const HttpResponse get_batch = stack.call(make_request("GET", "/v1/batchstring"));
    check_error(get_batch, 405, "method_not_allowed");
    CHECK(get_batch.header("allow") == "POST");
    check_error(stack.call(make_request("POST", "/healthz", "x")), 405, "method_not_allowed");
  }
}

TEST_CASE("healthz, readyz, HEAD and metrics") {
  Stack stack("auto");
  CHECK(stack.call(make_request("GET", "/healthz")).status == 200);
  const HttpResponse ready = stack.call(make_request("GET", "/readyz"));
  CHECK(ready.status == 200);
  CHECK(ready.body == R"({"status":"ready"})");
  const HttpResponse head = stack.call(make_request("HEAD", "/healthz"), true);
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(head.header("content-length") == "15");
  CHECK(stack.call(batch_request("count me")).status == 200);
  const HttpResponse metrics = stack.call(make_request("GET", "/metrics"));
  CHECK(metrics.status == 200);
  CHECK(metrics.header("content-type").starts_with("text/plain; version=0.0.4"));
  for (const char* name : {"batchd_http_requests_total{code=\"200\"}", "batchd_http_request_duration_seconds_bucket",
                           "batchd_http_requests_in_flight", "batchd_daemon_up 1", "batchd_daemon_queue_depth",
                           "batchd_daemon_batch_size_bucket{le=\"1\"}", "batchd_daemon_device_state{model=\"batchstring\",version=\"1\",device=\"0\"",
                           "batchd_http_connections_open"}) {
    CAPTURE(name);
    CHECK(metrics.body.find(name) != std::string::npos);
  }
}

TEST_CASE("priority: X-Priority and the JSON field reach the daemon in their class; /metrics counts them") {
  // Every caller granted high, so each claim runs as made (test_http_priority.cpp: grants).
  Stack stack("auto", {"--default-max-priority", "high"});
  HttpClient client(stack.frontend.port());
  const auto ok = [&](const std::string& request, const std::string& input) {
    auto r = client.round_trip(request);
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->body == expected_json_output(input));
  };
  ok(batch_request("h1", {"X-Priority: high"}), "h1");
  ok(make_request("POST", "/v1/batchstring", R"({"input":"h2","priority":"high"})"), "h2");
  ok(make_request("POST", "/v1/batchstring", R"({"input":"h3","priority":"high"})", {"X-Priority: high"}), "h3");
  ok(batch_request("l1", {"X-Priority: low"}), "l1");
  ok(make_request("POST", "/v1/batchstring", R"({"input":"l2","priority":"low"})"), "l2");
  ok(batch_request("n1"), "n1");
  auto text = client.round_trip(make_request("POST", "/v1/batchstring", "t1", {"Content-Type: text/plain", "X-Priority: low"}));
  REQUIRE(text.has_value());
  CHECK(text->status == 200);
  CHECK(text->body == reference_batchstring("t1", 1));
  check_error(stack.call(make_request("POST", "/v1/batchstring", R"({"input":"x","priority":"low"})",
                                      {"X-Priority: high"})),
              400, "bad_priority");
  check_error(stack.call(batch_request("x", {"X-Priority: urgent"})), 400, "bad_priority");
  // Refused requests never reach the daemon: 3 high, 1 normal, 3 low.
  const std::vector<std::string> series = {R"(batchd_daemon_class_requests_taken_total{class="high"} 3)",
                                           R"(batchd_daemon_class_requests_taken_total{class="normal"} 1)",
                                           R"(batchd_daemon_class_requests_taken_total{class="low"} 3)"};
  std::string body;
  const bool counted = eventually([&] {
    body = stack.call(make_request("GET", "/metrics")).body;
    for (const auto& line : series) {
      if (body.find(line + "\n") == std::string::npos) return false;
    }
    return true;
  }, 10s);
  INFO(body);
  CHECK(counted);
  CHECK(body.find("# TYPE batchd_daemon_class_requests_taken_total counter\n") != std::string::npos);
  CHECK(body.find("# HELP batchd_daemon_class_requests_taken_total ") != std::string::npos);
}

TEST_CASE("Expect: 100-continue, then the answer") {
  Stack stack("auto");
  HttpClient client(stack.frontend.port());
  const std::string body = R"({"input":"continue"})";
  REQUIRE(client.send("POST /v1/batchstring HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n"));
  auto interim = client.read_response();
  REQUIRE(interim.has_value());
  CHECK(interim->status == 100);
  REQUIRE(client.send(body));
  auto r = client.read_response();
  REQUIRE(r.has_value());
  CHECK(r->body == expected_json_output("continue"));
}

TEST_CASE("Connection: close is honoured") {
  Stack stack("auto");
  HttpClient client(stack.frontend.port());
  auto r = client.round_trip(batch_request("bye", {"Connection: close"}));
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
  CHECK_FALSE(r->keep_alive);
  CHECK(client.wait_closed(5s));
}

TEST_CASE("504 when the deadline passes; 500 with the backend's message; 503 when no device is healthy") {
  SUBCASE("504") {
    Stack stack("auto", {}, {"--backend", "sim", "--sim-fixed-us", "600000", "--max-wait-ms", "1"});
    const HttpResponse r = stack.call(batch_request("slow", {"X-Timeout-Ms: 100"}));
    check_error(r, 504, "timeout");
  }
  SUBCASE("500") {
    Stack stack("auto", {}, {"--backend", "sim", "--sim-poison", "POISON", "--max-wait-ms", "1"});
    const HttpResponse r = stack.call(batch_request("POISON pill"));
    check_error(r, 500, "backend_error");
    CHECK(r.body.find("poison") != std::string::npos);
    CHECK(stack.call(batch_request("fine")).status == 200);
    // The poison input failed alone: one dead letter, in the daemon's counters on /metrics.
    std::string body;
    CHECK(eventually([&] {
      body = stack.call(make_request("GET", "/metrics")).body;
      return body.find("batchd_daemon_dead_letters_total 1\n") != std::string::npos;
    }, 10s));
    INFO(body);
    CHECK(body.find("batchd_daemon_dead_letters_dropped_total 0\n") != std::string::npos);
  }
  SUBCASE("503 backend_unavailable, and /readyz says why") {
    Stack stack("auto", {}, {"--backend", "sim", "--sim-devices", "1", "--sim-hang", "0", "--sim-hang-ms", "3000",
                             "--device-timeout-ms", "100", "--max-wait-ms", "1"});
    const HttpResponse r = stack.call(batch_request("hangs", {"X-Timeout-Ms: 2500"}));
    check_error(r, 503, "backend_unavailable");
    CHECK(r.header("retry-after") == "1");
    const HttpResponse ready = stack.call(make_request("GET", "/readyz"));
    check_error(ready, 503, "no_healthy_device");
  }
}

TEST_CASE("overloaded (503, or 429 by --overload-status) with Retry-After when no slot is free; /readyz says 503") {
  for (const unsigned shed : {503U, 429U}) {
    CAPTURE(shed);
    std::vector<std::string> flags{"--workers", "1"};
    if (shed == 429) flags.insert(flags.end(), {"--overload-status", "429"});
    Stack stack("auto", flags,
                {"--backend", "sim", "--sim-fixed-us", "400000", "--max-wait-ms", "1", "--slots-per-client", "16"});
    HttpClient client(stack.frontend.port());
    std::string burst;
    constexpr int kRequests = 40;
    for (int i = 0; i < kRequests; ++i) burst += batch_request("o" + std::to_string(i));
    REQUIRE(client.send(burst));
    // Readiness is the node's state, for a balancer's health check: 503 whatever shedding says.
    HttpClient probe(stack.frontend.port());
    const auto ready = probe.round_trip(make_request("GET", "/readyz"));
    REQUIRE(ready.has_value());
    check_error(*ready, 503, "overloaded");
    int ok = 0;
    int overloaded = 0;
    for (int i = 0; i < kRequests; ++i) {
      auto r = client.read_response();
      REQUIRE(r.has_value());
      if (r->status == 200) ++ok;
      if (r->status == shed && error_code_of(r->body) == "overloaded" && r->header("retry-after") == "1") ++overloaded;
    }
    CHECK(ok == 16);
    CHECK(overloaded == kRequests - 16);
    // 429s are counted under their own status on /metrics (where 503s are also the start-up's
    // readiness polls and the probe's, so not counted exactly).
    if (shed == 429) {
      const std::string metrics = stack.call(make_request("GET", "/metrics")).body;
      INFO(metrics);
      CHECK(metrics.find("code=\"429\"} " + std::to_string(kRequests - 16) + "\n") != std::string::npos);
    }
  }
}

TEST_CASE("503 daemon_unavailable before the daemon starts, recovery when it comes, and again after it restarts") {
  for (const auto& mode : kModes) {
    CAPTURE(mode);
    const std::string socket = temp_socket_path();
    FrontendProcess frontend(socket, {"--io-mode", mode, "--workers", "2"}, false);
    auto call = [&](const std::string& request) {
      HttpClient client(frontend.port());
      auto r = client.round_trip(request);
      REQUIRE(r.has_value());
      return *r;
    };
    CHECK(call(make_request("GET", "/healthz")).status == 200);
    check_error(call(make_request("GET", "/readyz")), 503, "daemon_unavailable");
    const HttpResponse early = call(batch_request("early"));
    check_error(early, 503, "daemon_unavailable");
    CHECK(early.header("retry-after") == "1");
    {
      DaemonProcess daemon(socket, {"--max-wait-ms", "1"});
      REQUIRE(frontend.wait_ready(10s));
      CHECK(call(batch_request("late")).body == expected_json_output("late"));
    }
    // The daemon is gone: not ready, and requests fail fast instead of hanging.
    REQUIRE(eventually([&] { return call(make_request("GET", "/readyz")).status == 503; }, 5s));
    CHECK(call(batch_request("gone")).status == 503);
    DaemonProcess again(socket, {"--max-wait-ms", "1"});
    REQUIRE(frontend.wait_ready(10s));
    CHECK(call(batch_request("back")).body == expected_json_output("back"));
  }
}

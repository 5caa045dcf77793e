// The protocol layer alone (HttpConnection + Api, no sockets, no daemon): parsing, pipelining
// order, limits, framing and the API's checks and error mapping.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "frontend/connection.hpp"
#include "frontend/http_api.hpp"
#include "tests/http/fake_api_context.hpp"

using namespace batchd;
using namespace batchd::http;

namespace {

using testing::FakeContext;

// A connection with the real router behind it; batchstring submissions wait in `submitted` until
// the test answers them.
struct Harness final : HttpConnection::Handler {
  explicit Harness(ConnectionLimits limits = {}) : conn(limits, date), api(ApiLimits{}, context) {}

  void on_request(std::uint64_t seq, Request&& request) override {
    Action action = api.route(request);
    if (auto* response = std::get_if<Response>(&action)) {
      conn.complete(seq, *response);
    } else {
      submitted.emplace_back(seq, std::get<SubmitAction>(std::move(action)));
    }
  }
  void feed(std::string_view bytes) {
    conn.append_input(bytes, 1);
    conn.pump(*this, 1);
  }
  void answer(std::size_t i, std::string output) {
    conn.complete(submitted[i].first, response_for_result(Result::success(std::move(output)),
                                                          submitted[i].second.format, oip::OverloadStatus::k503));
    conn.pump(*this, 2);
  }
  std::string drain() {
    std::string out;
    for (std::string_view chunk = conn.begin_send(); !chunk.empty(); chunk = conn.begin_send()) {
      out.append(chunk);
      conn.sent(chunk.size());
    }
    return out;
  }

  std::string date = "Thu, 01 Jan 1970 00:00:00 GMT";
  FakeContext context;
  HttpConnection conn;
  Api api;
  std::vector<std::pair<std::uint64_t, SubmitAction>> submitted;
};

std::string post(std::string_view body, std::string_view extra = "") {
  return "POST /v1/batchstring HTTP/1.1\r\nHost: t\r\n" + std::string(extra) + "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

std::size_t count(const std::string& haystack, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("pipelined requests answered out of order are written in request order") {
  Harness h;
  h.feed(post(R"({"input":"a"})") + post(R"({"input":"b"})") + post(R"({"input":"c"})"));
  REQUIRE(h.submitted.size() == 3);
  CHECK(h.submitted[1].second.input == "b");
  h.answer(2, "C");
  h.answer(1, "B");
  CHECK(h.drain().empty());  // the first is still owed
  h.answer(0, "A");
  const std::string out = h.drain();
  const auto a = out.find(R"({"output":"A"})");
  const auto b = out.find(R"({"output":"B"})");
  const auto c = out.find(R"({"output":"C"})");
  REQUIRE(a != std::string::npos);
  CHECK(a < b);
  CHECK(b < c);
  CHECK(count(out, "HTTP/1.1 200 OK") == 3);
  CHECK(h.conn.quiet());
}

TEST_CASE("a request arriving one byte at a time parses, and its phase is tracked") {
  Harness h;
  const std::string request = post(R"({"input":"slow"})");
  const std::size_t header_end = request.find("\r\n\r\n") + 4;
  for (std::size_t i = 0; i + 1 < request.size(); ++i) {
    h.feed(request.substr(i, 1));
    CHECK(h.conn.phase() == (i + 1 < header_end ? HttpConnection::Phase::kHeader : HttpConnection::Phase::kBody));
  }
  CHECK(h.submitted.empty());
  h.feed(request.substr(request.size() - 1));
  REQUIRE(h.submitted.size() == 1);
  CHECK(h.submitted[0].second.input == "slow");
  CHECK(h.conn.phase() == HttpConnection::Phase::kNone);
}

TEST_CASE("limits: header too large is 431, body too large is 413, garbage is 400; each closes") {
  ConnectionLimits limits;
  limits.max_header_bytes = 512;
  limits.max_body_bytes = 64;
  SUBCASE("header") {
    Harness h(limits);
    h.feed("GET /healthz HTTP/1.1\r\nX-Big: " + std::string(600, 'x') + "\r\n\r\n");
    const std::string out = h.drain();
    CHECK(out.starts_with("HTTP/1.1 431 "));
    CHECK(out.find("header_too_large") != std::string::npos);
    CHECK(out.find("Connection: close") != std::string::npos);
    CHECK(h.conn.done());
  }
  SUBCASE("body, told by Content-Length before it arrives") {
    Harness h(limits);
    h.feed("POST /v1/batchstring HTTP/1.1\r\nContent-Length: 65\r\n\r\n");
    CHECK(h.drain().starts_with("HTTP/1.1 413 "));
    CHECK(h.conn.done());
  }
  SUBCASE("garbage") {
    Harness h(limits);
    h.feed("HELLO THERE\r\n\r\n");
    const std::string out = h.drain();
    CHECK(out.starts_with("HTTP/1.1 400 "));
    CHECK(out.find(R"("code":"bad_request")") != std::string::npos);
    CHECK(h.conn.done());
  }
  SUBCASE("a request after an error is never parsed") {
    Harness h(limits);
    h.feed("BAD\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n");
    CHECK(count(h.drain(), "HTTP/1.1 ") == 1);
  }
}

TEST_CASE("keep-alive, Connection: close and HTTP/1.0") {
  SUBCASE("close is honoured and ends parsing") {
    Harness h;
    h.feed("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n");
    const std::string out = h.drain();
    CHECK(count(out, "HTTP/1.1 200") == 1);
    CHECK(out.find("Connection: close") != std::string::npos);
    CHECK(h.conn.done());
  }
  SUBCASE("HTTP/1.0 without keep-alive closes") {
    Harness h;
    h.feed("GET /healthz HTTP/1.0\r\n\r\n");
    CHECK(h.drain().find("Connection: close") != std::string::npos);
    CHECK(h.conn.done());
  }
  SUBCASE("HTTP/1.1 stays open") {
    Harness h;
    h.feed("GET /healthz HTTP/1.1\r\n\r\n");
    CHECK(h.drain().find("Connection: close") == std::string::npos);
    CHECK_FALSE(h.conn.done());
    CHECK(h.conn.wants_input());
  }
}

TEST_CASE("too many requests owed: parsing pauses and resumes as answers drain") {
  ConnectionLimits limits;
  limits.max_pending = 2;
  Harness h(limits);
  std::string burst;
  for (int i = 0; i < 5; ++i) burst += post(R"({"input":"x)" + std::to_string(i) + "\"}");
  h.feed(burst);
  CHECK(h.submitted.size() == 2);
  CHECK_FALSE(h.conn.wants_input());
  CHECK(h.conn.blocked_on_us());
  h.answer(0, "0");
  h.answer(1, "1");
  CHECK(h.submitted.size() == 4);
  h.answer(2, "2");
  h.answer(3, "3");
  REQUIRE(h.submitted.size() == 5);
  h.answer(4, "4");
  const std::string out = h.drain();
  for (int i = 0; i < 5; ++i) CHECK(out.find(R"({"output":")" + std::to_string(i) + "\"}") != std::string::npos);
  CHECK(h.conn.wants_input());
}

TEST_CASE("HEAD gets headers only; Expect: 100-continue gets an interim response") {
  Harness h;
  h.feed("HEAD /healthz HTTP/1.1\r\n\r\n");
  const std::string head = h.drain();
  CHECK(head.find("Content-Length: 15") != std::string::npos);
  CHECK(head.ends_with("\r\n\r\n"));
  h.feed("POST /v1/batchstring HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 13\r\n\r\n");
  CHECK(h.drain() == "HTTP/1.1 100 Continue\r\n\r\n");
  h.feed(R"({"input":"e"})");
  REQUIRE(h.submitted.size() == 1);
}

TEST_CASE("a chunked body is accepted; EOF drops only a partial request") {
  Harness h;
  h.feed("POST /v1/batchstring HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"inp\r\n8\r\nut\":\"k\"}\r\n0\r\n\r\n");
  REQUIRE(h.submitted.size() == 1);
  CHECK(h.submitted[0].second.input == "k");
  h.feed("GET /hea");
  h.conn.input_closed();
  h.conn.pump(h, 3);
  CHECK_FALSE(h.conn.done());  // one answer still owed
  h.answer(0, "K");
  CHECK(h.drain().find(R"({"output":"K"})") != std::string::npos);
  CHECK(h.conn.done());
}

TEST_CASE("a chunked body whose last chunk arrives byte by byte (Boost 1.81 asserts on it unguarded)") {
  Harness h;
  h.feed("POST /v1/batchstring HTTP/1.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
         "2\r\nok\r\n");
  for (const char* piece : {"0", "\r", "\n", "\r", "\n"}) h.feed(piece);
  REQUIRE(h.submitted.size() == 1);
  CHECK(h.submitted[0].second.input == "ok");
  Harness fresh;
  fresh.feed("POST /v1/batchstring HTTP/1.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n");
  for (const char* piece : {"\r", "\n"}) fresh.feed(piece);
  REQUIRE(fresh.submitted.size() == 1);
  CHECK(fresh.submitted[0].second.input.empty());
}

TEST_CASE("the API's checks and the error table") {
  Harness h;
  auto one = [&](const std::string& request) {
    h.feed(request);
    return h.drain();
  };
  CHECK(one(post("{nope")).find(R"("code":"invalid_json")") != std::string::npos);
  CHECK(one(post(R"({"other":1})")).find(R"("code":"missing_field")") != std::string::npos);
  CHECK(one(post(R"({"input":1})")).find(R"("code":"bad_request")") != std::string::npos);
  CHECK(one(post(R"(["input"])")).find(R"("code":"bad_request")") != std::string::npos);
  CHECK(one(post("{\"input\":\"\xC3\x28\"}")).find(R"("code":"invalid_utf8")") != std::string::npos);
  CHECK(one(post("\xFF", "Content-Type: text/plain\r\n")).find(R"("code":"invalid_utf8")") != std::string::npos);
  CHECK(one(post(R"({"input":"a"})", "X-Timeout-Ms: soon\r\n")).find(R"("code":"bad_timeout")") != std::string::npos);
  CHECK(one(post(R"({"input":")" + std::string(1025, 'a') + "\"}")).find("HTTP/1.1 413") == 0);
  CHECK(one("GET /nope HTTP/1.1\r\n\r\n").find("HTTP/1.1 404") == 0);
  const std::string wrong_method = one("GET /v1/batchstring HTTP/1.1\r\n\r\n");
  CHECK(wrong_method.find("HTTP/1.1 405") == 0);
  CHECK(wrong_method.find("Allow: POST") != std::string::npos);
  CHECK(one("GET /metrics HTTP/1.1\r\n\r\n").find("text/plain; version=0.0.4") != std::string::npos);
  h.context.ready = false;
  const std::string not_ready = one("GET /readyz HTTP/1.1\r\n\r\n");
  CHECK(not_ready.find("HTTP/1.1 503") == 0);
  CHECK(not_ready.find(R"("code":"overloaded")") != std::string::npos);
  CHECK(h.submitted.empty());

  h.feed(post(R"({"input":"tab\there \u00e9 \"q\""})", "X-Timeout-Ms: 999999999\r\n"));
  h.feed(post("plain", "Content-Type: Text/Plain; charset=utf-8\r\n"));
  REQUIRE(h.submitted.size() == 2);
  CHECK(h.submitted[0].second.input == "tab\there \xC3\xA9 \"q\"");
  CHECK(h.submitted[0].second.timeout == ApiLimits{}.max_timeout);
  CHECK(h.submitted[1].second.format == BodyFormat::kText);
  CHECK(h.submitted[1].second.input == "plain");
}

TEST_CASE("priority: X-Priority and the JSON \"priority\" field, alone or agreeing; normal without either") {
  Harness h;
  h.feed(post(R"({"input":"a"})"));
  h.feed(post(R"({"input":"b"})", "X-Priority: high\r\n"));
  h.feed(post(R"({"input":"c","priority":"low"})"));
  h.feed(post(R"({"priority":"high","input":"d"})", "X-Priority:  high \r\n"));
  h.feed(post("e", "Content-Type: text/plain\r\nX-Priority: low\r\n"));
  h.feed(post(R"({"input":"f","priority":"normal"})", "X-Priority: normal\r\n"));
  REQUIRE(h.submitted.size() == 6);
  const Priority expected[] = {Priority::kNormal, Priority::kHigh, Priority::kLow,
                               Priority::kHigh,   Priority::kLow,  Priority::kNormal};
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(h.submitted[i].second.priority == expected[i]);
  }
  CHECK(h.submitted[4].second.format == BodyFormat::kText);
  CHECK(h.submitted[4].second.input == "e");
}

TEST_CASE("priority: unknown classes, a non-string field and a disagreement are 400 bad_priority") {
  Harness h;
  auto one = [&](const std::string& request) {
    h.feed(request);
    return h.drain();
  };
  const std::string unknown_header = one(post(R"({"input":"a"})", "X-Priority: urgent\r\n"));
  CHECK(unknown_header.find("HTTP/1.1 400") == 0);
  CHECK(unknown_header.find(R"("code":"bad_priority")") != std::string::npos);
  CHECK(unknown_header.find(R"(X-Priority must be high, normal or low, not \"urgent\")") != std::string::npos);
  // Exact lower case, as the names are written everywhere else.
  CHECK(one(post("t", "Content-Type: text/plain\r\nX-Priority: High\r\n")).find(R"("code":"bad_priority")") !=
        std::string::npos);
  CHECK(one(post(R"({"input":"a"})", "X-Priority:\r\n")).find(R"("code":"bad_priority")") != std::string::npos);
  const std::string unknown_field = one(post(R"({"input":"a","priority":"urgent"})"));
  CHECK(unknown_field.find(R"("code":"bad_priority")") != std::string::npos);
  CHECK(unknown_field.find("must be high, normal or low") != std::string::npos);
  CHECK(one(post(R"({"input":"a","priority":1})")).find(R"("code":"bad_priority")") != std::string::npos);
  CHECK(one(post(R"({"input":"a","priority":null})")).find(R"("code":"bad_priority")") != std::string::npos);
  const std::string disagree = one(post(R"({"input":"a","priority":"low"})", "X-Priority: high\r\n"));
  CHECK(disagree.find("HTTP/1.1 400") == 0);
  CHECK(disagree.find(R"("code":"bad_priority")") != std::string::npos);
  CHECK(disagree.find("X-Priority and the JSON priority field disagree") != std::string::npos);
  // A caller's long value is not echoed whole.
  CHECK(one(post(R"({"input":"a"})", "X-Priority: " + std::string(1000, 'x') + "\r\n")).size() < 600);
  CHECK(h.submitted.empty());
}

TEST_CASE("answers: JSON escaping, raw text, invalid UTF-8 output, and each error's status") {
  const Response json =
      response_for_result(Result::success("a\"b\\c\n\x01"), BodyFormat::kJson, oip::OverloadStatus::k503);
  CHECK(json.body == R"({"output":"a\"b\\c\u000a\u0001"})");
  CHECK(response_for_result(Result::success("raw\n"), BodyFormat::kText, oip::OverloadStatus::k503).body == "raw\n");
  CHECK(response_for_result(Result::success("\xFF"), BodyFormat::kJson, oip::OverloadStatus::k503).status == 500);
  struct Case {
    ErrorCode code;
    unsigned status;
    bool retry;
  };
  for (const Case c : {Case{ErrorCode::kTimeout, 504, false}, Case{ErrorCode::kOverloaded, 503, true},
                       Case{ErrorCode::kTooLarge, 413, false}, Case{ErrorCode::kInvalidUtf8, 400, false},
                       Case{ErrorCode::kDaemonUnavailable, 503, true}, Case{ErrorCode::kBackendError, 500, false},
                       Case{ErrorCode::kBackendUnavailable, 503, true}, Case{ErrorCode::kUnknownModel, 404, false}}) {
    const Response r = response_for_error(Error{c.code, "why"}, oip::OverloadStatus::k503);
    CHECK(r.status == c.status);
    CHECK((r.retry_after_s != 0) == c.retry);
    CHECK(r.body.find(R"("message":"why")") != std::string::npos);
    // --overload-status 429 changes the answer to shedding and nothing else.
    const Response r429 = response_for_error(Error{c.code, "why"}, oip::OverloadStatus::k429);
    CHECK(r429.status == (c.code == ErrorCode::kOverloaded ? 429 : c.status));
    CHECK(r429.retry_after_s == r.retry_after_s);
    CHECK(r429.body == r.body);
  }
  std::string wire;
  serialize(response_for_error(Error{ErrorCode::kOverloaded, "full"}, oip::OverloadStatus::k429), Framing{}, wire);
  CHECK(wire.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
  CHECK(wire.find("\r\nRetry-After: 1\r\n") != std::string::npos);
}

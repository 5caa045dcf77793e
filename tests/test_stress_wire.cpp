// batchd-stress's HTTP response reader (Beast's parser fed from a byte buffer) and body decoder,
// without sockets: Content-Length, chunked and close-delimited bodies, responses that arrive
// byte by byte, and pipelined responses that arrive together, one taken at a time; the Open
// Inference Protocol's requests and answers (--protocol v2).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tools/stress_http_proto.hpp"
#include "tools/stress_http_response.hpp"
#include "tools/stress_stats.hpp"
#include "tests/doctest_expected.hpp"

using batchd::ErrorCode;
using batchd::stress::error_kind;
using batchd::stress::kBadRequestKind;
using batchd::stress::Outcome;
using batchd::stress::http::BodyDecoder;
using batchd::stress::http::ResponseReader;
using Step = ResponseReader::Step;

namespace {

const std::string kLength =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 14\r\n\r\n"
    R"({"output":"a"})";
const std::string kChunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "6\r\n{\"outp\r\n8\r\nut\":\"b\"}\r\n0\r\n\r\n";

struct Read {
  int status = 0;
  std::string body;
  bool keep_alive = false;
};

// Feeds `wire` to a reader `piece` bytes at a time, as a connection's receive buffer would
// (what the reader takes is dropped, the rest kept), and collects every response.
std::vector<Read> read_all(const std::string& wire, std::size_t piece) {
  ResponseReader reader;
  std::vector<Read> reads;
  std::string in;
  for (std::size_t at = 0; at < wire.size(); at += piece) {
    in.append(wire, at, piece);
    for (;;) {
      std::size_t used = 0;
      const Step step = reader.read(in, used);
      in.erase(0, used);
      REQUIRE_MESSAGE(step != Step::kBad, reader.problem());
      if (step == Step::kNeedMore) break;
      reads.push_back(Read{reader.status(), std::string(reader.body()), reader.keep_alive()});
    }
  }
  CHECK(in.empty());
  return reads;
}

}  // namespace

TEST_CASE("a Content-Length and a chunked response, whole or byte by byte") {
  for (const std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{4096}}) {
    CAPTURE(piece);
    const std::vector<Read> reads = read_all(kLength + kChunked, piece);
    REQUIRE(reads.size() == 2);
    CHECK(reads[0].status == 200);
    CHECK(reads[0].body == R"({"output":"a"})");
    CHECK(reads[0].keep_alive);
    CHECK(reads[1].body == R"({"output":"b"})");
    CHECK(reads[1].keep_alive);
  }
}

TEST_CASE("a chunked response whose last chunk arrives in pieces") {
  // With no data chunk the last chunk comes without the CRLF ahead of it; Boost 1.81's parser
  // would assert (and a build with assertions abort) if resumed on fewer than its 5 bytes.
  const std::string empty = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  for (const std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    const std::vector<Read> reads = read_all(empty + empty, piece);
    REQUIRE(reads.size() == 2);
    CHECK(reads[1].status == 200);
    CHECK(reads[1].body.empty());
  }
}

TEST_CASE("pipelined responses that arrived together: each read takes exactly one") {
  const std::string wire = kChunked + kLength + kChunked;
  ResponseReader reader;
  std::size_t used = 0;
  REQUIRE(reader.read(wire, used) == Step::kDone);
  CHECK(used == kChunked.size());
  CHECK(reader.body() == R"({"output":"b"})");
  std::size_t next = 0;
  REQUIRE(reader.read(std::string_view(wire).substr(used), next) == Step::kDone);
  CHECK(next == kLength.size());
  CHECK(reader.body() == R"({"output":"a"})");
}

TEST_CASE("1xx responses come back alone, before the answer") {
  const std::vector<Read> reads = read_all("HTTP/1.1 100 Continue\r\n\r\n" + kLength, 3);
  REQUIRE(reads.size() == 2);
  CHECK(reads[0].status == 100);
  CHECK(reads[1].status == 200);
}

TEST_CASE("closing: Connection: close, HTTP/1.0, and a body that ends with the connection") {
  const auto keeps_alive = [](const std::string& head) {
    const std::vector<Read> reads = read_all(head + "Content-Length: 0\r\n\r\n", 100);
    REQUIRE(reads.size() == 1);
    return reads[0].keep_alive;
  };
  CHECK_FALSE(keeps_alive("HTTP/1.1 200 OK\r\nConnection: close\r\n"));
  CHECK_FALSE(keeps_alive("HTTP/1.0 200 OK\r\n"));
  CHECK(keeps_alive("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"));

  ResponseReader reader;
  CHECK(reader.read_eof() == Step::kNeedMore);  // nothing begun: nothing to finish
  const std::string wire = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"output\":\"c\"}";
  std::size_t used = 0;
  REQUIRE(reader.read(wire, used) == Step::kNeedMore);
  CHECK(used == wire.size());
  REQUIRE(reader.read_eof() == Step::kDone);
  CHECK(reader.body() == R"({"output":"c"})");
  CHECK_FALSE(reader.keep_alive());
}

TEST_CASE("what cannot be framed is refused, and a cut-off body is not taken for whole") {
  ResponseReader reader;
  std::size_t used = 0;
  CHECK(reader.read("SMTP ready\r\n\r\n", used) == Step::kBad);
  CHECK_FALSE(reader.problem().empty());
  reader.reset();
  const std::string cut = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
  REQUIRE(reader.read(cut, used) == Step::kNeedMore);
  CHECK(reader.read_eof() == Step::kBad);
  reader.reset();
  CHECK(reader.read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", used) == Step::kBad);
}

TEST_CASE("bodies: an output, an error code, or only a status") {
  BodyDecoder decoder;
  const Outcome answered = decoder.decode(200, R"({"output":"abc\n"})");
  CHECK(answered.answered);
  CHECK(answered.output == "abc\n");
  CHECK(decoder.decode(200, R"({"result":"abc"})").error_kind == error_kind(ErrorCode::kProtocolError));
  const Outcome unavailable =
      decoder.decode(503, R"({"error":{"code":"daemon_unavailable","message":"x"}})");
  CHECK_FALSE(unavailable.answered);
  CHECK(unavailable.error_kind == error_kind(ErrorCode::kDaemonUnavailable));
  CHECK(decoder.decode(503, "busy").error_kind == error_kind(ErrorCode::kOverloaded));
  CHECK(decoder.decode(400, "{}").error_kind == kBadRequestKind);
}

TEST_CASE("--protocol v2: a JSON tensor of one string out, the output tensor's string or the status's kind back") {
  using batchd::stress::http::Api;
  const auto url = batchd::stress::http::parse_url("http://localhost:8000", Api::kV2);
  REQUIRE(url);
  CHECK(url->target == "/v2/models/batchstring/infer");
  batchd::stress::http::RequestEncoder encoder(*url, std::chrono::milliseconds(250), Api::kV2);
  std::string request;
  encoder.append(request, "a\"b", batchd::Priority::kHigh);
  CHECK(request.starts_with("POST /v2/models/batchstring/infer HTTP/1.1\r\n"));
  CHECK(request.find("X-Timeout-Ms: 250\r\n") != std::string::npos);
  CHECK(request.find("X-Priority: high\r\n") != std::string::npos);
  CHECK(request.ends_with(R"({"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"BYTES","data":["a\"b"]}]})"));

  BodyDecoder decoder(Api::kV2);
  const Outcome answered = decoder.decode(
      200, R"({"model_name":"batchstring","model_version":"1","outputs":[{"name":"OUTPUT","datatype":"BYTES",)"
           R"("shape":[1,1],"data":["abc\n"]}]})");
  CHECK(answered.answered);
  CHECK(answered.output == "abc\n");
  CHECK(decoder.decode(200, R"({"output":"abc"})").error_kind == error_kind(ErrorCode::kProtocolError));
  CHECK(decoder.decode(200, R"({"outputs":[{"name":"OUTPUT","data":[]}]})").error_kind ==
        error_kind(ErrorCode::kProtocolError));
  // The protocol's errors are {"error": "message"}: the status says what kind.
  CHECK(decoder.decode(503, R"({"error":"the submission ring is full; retry later"})").error_kind ==
        error_kind(ErrorCode::kOverloaded));
  CHECK(decoder.decode(504, R"({"error":"no answer before the deadline"})").error_kind ==
        error_kind(ErrorCode::kTimeout));
  CHECK(decoder.decode(400, R"({"error":"string 0 of input 'INPUT' is not valid UTF-8"})").error_kind ==
        kBadRequestKind);
  CHECK(decoder.decode(404, R"({"error":"unknown model"})").error_kind == error_kind(ErrorCode::kProtocolError));
}

TEST_CASE("URLs: host, port and target taken apart, or refused with the reason") {
  using batchd::stress::http::parse_url;
  const auto v6 = parse_url("http://[::1]:8080/v2/x");
  REQUIRE(v6);
  CHECK(v6->host == "::1");
  CHECK(v6->port == "8080");
  CHECK(v6->target == "/v2/x");
  CHECK(v6->host_header == "[::1]:8080");
  const auto plain = parse_url("http://localhost");
  REQUIRE(plain);
  CHECK(plain->port == "80");
  CHECK(plain->target == "/v1/batchstring");
  for (const auto& [url, why] : {std::pair{"https://a", "https is not supported"},
                                 std::pair{"http://a:0", "bad port"},
                                 std::pair{"http://::1:80", "needs brackets"},
                                 std::pair{"http://u@a", "user info"}}) {
    const auto refused = parse_url(url);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().code == std::errc::invalid_argument);
    CHECK(refused.error().message.find(why) != std::string::npos);
  }
}

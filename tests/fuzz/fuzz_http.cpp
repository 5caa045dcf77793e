// libFuzzer target over batchd-http's protocol layer: the bytes are one connection's input
// stream, fed in pieces to HttpConnection with the real router (Api) behind it and a fake daemon
// that answers out of order. Checks that every request gets exactly one well-formed response, in
// request order, that error bodies are JSON with a code, and that the pipelining limit holds.
//
// Input layout: byte 0 seeds the chunking and answer order, byte 1 picks the limits, the rest is
// the stream. Built with clang++ -fsanitize=fuzzer,address,undefined by run-fuzz.sh.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <simdjson.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "frontend/connection.hpp"
#include "frontend/http_api.hpp"

using namespace batchd;
using namespace batchd::http;

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_http invariant broken: %s\n", what);
    std::abort();
  }
}

class FakeContext final : public ApiContext {
 public:
  Readiness readiness() override { return {toggle = !toggle, "overloaded", "fake"}; }
  std::string metrics_text() override { return "batchd_http_workers 1\n"; }
  std::uint32_t max_input_bytes() override { return 300; }
  InferStatistics infer_statistics(std::uint32_t) override { return {}; }
  std::vector<oip::ModelTimes> model_times() override { return {}; }
  const oip::ModelCatalog& models() override { return oip::default_catalog(); }
  bool toggle = false;
};

// A small deterministic generator, so a crash reproduces from its input alone.
struct Lcg {
  std::uint32_t state;
  std::uint32_t next() { return state = state * 1664525U + 1013904223U; }
};

struct Fake final : HttpConnection::Handler {
  struct Expect {
    unsigned status = 0;  // 0 while the fake daemon owes the answer
    bool head = false;
  };

  Fake(const ConnectionLimits& limits, std::uint32_t seed)
      : conn(limits, date), api(ApiLimits{}, context), rng{seed}, max_pending(limits.max_pending) {}

  void on_request(std::uint64_t seq, Request&& request) override {
    require(seq == expected.size(), "sequence numbers are dense and increasing");
    require(conn.pending() <= max_pending, "no more requests owed than --max-pipelined");
    expected.push_back({0, request.method() == boost::beast::http::verb::head});
    Action action = api.route(request);
    if (auto* response = std::get_if<Response>(&action)) {
      expected.back().status = response->status;
      conn.complete(seq, *response);
    } else {
      owed.emplace_back(seq, std::get<SubmitAction>(std::move(action)));
    }
  }

  // Answers one owed request, picked by the generator (so out of order), success or an error.
  void answer_one() {
    const std::size_t i = rng.next() % owed.size();
    auto [seq, submit] = std::move(owed[i]);
    owed.erase(owed.begin() + static_cast<std::ptrdiff_t>(i));
    static constexpr ErrorCode kErrors[] = {ErrorCode::kTimeout, ErrorCode::kOverloaded, ErrorCode::kBackendError,
                                            ErrorCode::kDaemonUnavailable, ErrorCode::kBackendUnavailable};
    const std::uint32_t pick = rng.next() % 8;
    Result result = pick < 5 ? Result::failure(kErrors[pick], "fake \"error\"\n") : Result::success(submit.input);
    const Response response = response_for_result(std::move(result), submit.format, oip::OverloadStatus::k503);
    expected[seq].status = response.status;
    conn.complete(seq, response);
  }

  // Takes some of the output, sometimes only part of a write, as a socket would.
  void send_some(bool all) {
    for (std::string_view chunk = conn.begin_send(); !chunk.empty(); chunk = conn.begin_send()) {
      const std::size_t n = all ? chunk.size() : 1 + rng.next() % chunk.size();
      written.append(chunk.substr(0, n));
      conn.sent(n);
      if (!all) return;
    }
  }

  std::string date = "Thu, 01 Jan 1970 00:00:00 GMT";
  FakeContext context;
  HttpConnection conn;
  Api api;
  Lcg rng;
  std::uint32_t max_pending;
  std::vector<Expect> expected;
  std::vector<std::pair<std::uint64_t, SubmitAction>> owed;
  std::string written;
};

void check_error_body(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  require(parser.parse(body).get(root) == simdjson::SUCCESS, "error bodies are JSON");
  std::string_view code;
  require(root["error"]["code"].get_string().get(code) == simdjson::SUCCESS && !code.empty(),
          "error bodies carry a code");
}

// Parses what was written: one response per request in order (100 Continue aside), then at
// most one closing error response of the connection's own.
void check_output(const Fake& fake) {
  namespace beast_http = boost::beast::http;
  std::string_view rest = fake.written;
  std::size_t index = 0;
  bool closed = false;
  while (!rest.empty()) {
    require(!closed, "nothing is written after Connection: close");
    beast_http::response_parser<beast_http::string_body> parser;
    parser.eager(true);
    parser.body_limit(1 << 24);
    if (index < fake.expected.size() && fake.expected[index].head) parser.skip(true);
    boost::system::error_code ec;
    const std::size_t used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
    require(!ec && parser.is_done(), "every response is complete and well-formed");
    rest.remove_prefix(used);
    const auto& response = parser.get();
    const unsigned status = response.result_int();
    if (status == 100) continue;
    if (index < fake.expected.size()) {
      require(status == fake.expected[index].status, "responses come in request order");
    } else {
      require(status == 400 || status == 413 || status == 431 || status == 408, "only a parse error is extra");
      require(!response.keep_alive(), "a parse error closes the connection");
    }
    if (status >= 400 && !(index < fake.expected.size() && fake.expected[index].head)) check_error_body(response.body());
    closed = !response.keep_alive();
    ++index;
  }
  require(index >= fake.expected.size(), "every request got its response");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  ConnectionLimits limits;
  if ((data[1] & 1) != 0) {
    limits.max_header_bytes = 256;
    limits.max_body_bytes = 512;
    limits.max_pending = 3;
  }
  Fake fake(limits, data[0] * 2654435761U + data[1]);
  const std::string_view stream(reinterpret_cast<const char*>(data + 2), size - 2);
  std::int64_t now = 1;
  for (std::size_t at = 0; at < stream.size();) {
    const std::size_t piece = 1 + fake.rng.next() % 64;
    fake.conn.append_input(stream.substr(at, piece), ++now);
    at += piece;
    fake.conn.pump(fake, now);
    while (!fake.owed.empty() && fake.rng.next() % 3 != 0) fake.answer_one();
    fake.conn.pump(fake, now);
    fake.send_some(false);
  }
  if ((data[1] & 2) != 0) fake.conn.finish(error_response(408, "request_timeout", "fuzz"));
  fake.conn.input_closed();
  for (int guard = 0; guard < 100000; ++guard) {
    fake.conn.pump(fake, ++now);
    if (fake.owed.empty()) break;
    fake.answer_one();
  }
  fake.conn.pump(fake, ++now);
  fake.send_some(true);
  require(fake.owed.empty(), "every submitted request was answered");
  require(fake.conn.done(), "after EOF and the last answer the connection is done");
  check_output(fake);
  return 0;
}

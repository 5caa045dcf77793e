// Reading an HTTP front-end's responses: framing them out of received bytes with Boost.Beast's
// parser (fed buffers, no Asio sockets) and reading an answer or an error kind out of each body.
// No sockets here, so both can be checked alone.
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <simdjson.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "tools/stress_http_proto.hpp"
#include "tools/stress_transport.hpp"

namespace batchd::stress::http {

// Room made for one recv of response bytes, by the sync connections and the pipelined ones.
constexpr std::size_t kReadChunk = 64 * 1024;

// Frames HTTP/1.x responses: Content-Length, chunked, or (HTTP/1.0 style) ended by the close.
// One response at a time, so of pipelined responses that arrived together it takes the first
// and leaves the rest for the next read(). One per connection; not thread-safe.
class ResponseReader {
 public:
  enum class Step {
    kNeedMore,  // the response so far is incomplete: read() again when more bytes came
    kDone,      // one whole response: status(), body() and keep_alive() describe it
    kBad,       // it cannot be framed (problem() says why): the connection is unusable
  };

  // Parses from the front of `data` (what came after the bytes taken so far) and sets `used` to
  // the bytes it took, which the caller drops before the next call. After kDone the response
  // stays readable until the next read(), which starts the next one.
  Step read(std::string_view data, std::size_t& used);
  // The peer closed: a response whose body runs until the close is complete now (kDone); one
  // cut short is kBad. kNeedMore means none had begun.
  Step read_eof();
  // Forgets a response in progress: its connection closed.
  void reset() noexcept { parser_.reset(); }

  [[nodiscard]] int status() const noexcept { return static_cast<int>(parser_->get().result_int()); }
  [[nodiscard]] std::string_view body() const noexcept { return parser_->get().body(); }
  // Whether the connection stays open after this response (HTTP/1.1 without "close", or
  // HTTP/1.0 with "keep-alive", and a body not ended by the close).
  [[nodiscard]] bool keep_alive() const noexcept { return parser_->keep_alive(); }
  [[nodiscard]] std::string_view problem() const noexcept { return problem_; }

 private:
  using Parser = boost::beast::http::response_parser<boost::beast::http::string_body>;
  Parser& fresh_parser();
  [[nodiscard]] bool chunked_tail_too_short(std::size_t available) const noexcept;

  std::optional<Parser> parser_;  // the response being read, or the last one done
  std::string problem_;
};

// Reads response bodies with simdjson. One per thread: it reuses its parser and buffer.
class BodyDecoder {
 public:
  explicit BodyDecoder(Api api = Api::kV1) : api_(api) {}
  // 200 with the API's answer ({"output": "..."}, or for v2 an output tensor whose first string
  // is it): answered, the output valid until the next decode(). Anything else: the error kind the
  // status and the body's code name (v2's {"error": "message"} names none: the status decides).
  // With Api::kJobs, `body` is a poll's: 200 done gives the output; failed or expired, the error
  // kind its error's code names.
  Outcome decode(int status, std::string_view body);
  // A job's 202 or poll body: its id (empty when there is none), and whether it is still pending.
  // The id is valid until the next call.
  std::string_view job_id(std::string_view body);
  bool job_pending(std::string_view body);

 private:
  std::size_t error_kind_of(int status, std::string_view body);
  // The answer out of a 200's parsed body, or false when it has none where the API puts it.
  bool output_of(simdjson::ondemand::document& doc, std::string_view& output);
  // Copies body into padded_ (simdjson reads a little past the end) and returns its view.
  simdjson::padded_string_view padded(std::string_view body);

  Api api_;
  simdjson::ondemand::parser parser_;
  std::string padded_;
};

// The error kind for an HTTP error status when the body names no known code.
std::size_t error_kind_of_status(int status) noexcept;

}  // namespace batchd::stress::http

// One HTTP/1.1 connection's protocol state, without any I/O: bytes in (fed to Beast's parser, one
// parser per request so pipelined requests parse back to back), requests out to a handler, and
// responses back in any order but sent strictly in request order. The event loop moves the bytes;
// the fuzz target drives this class directly.
#pragma once

#include <boost/beast/http/parser.hpp>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "frontend/http_api.hpp"
#include "frontend/http_response.hpp"

namespace batchd::http {

struct ConnectionLimits {
  std::uint32_t max_header_bytes = 8192;
  std::uint64_t max_body_bytes = 1 << 20;
  // Requests parsed but not yet answered; past this the connection stops parsing (and the loop
  // stops reading) until answers drain, which bounds a pipelining client's memory.
  std::uint32_t max_pending = 128;
  std::size_t max_unsent_bytes = 4 << 20;  // answered but not yet written: the same, for slow readers
};

class HttpConnection {
 public:
  // Receives each complete request with its sequence number; answers it (now or later) through
  // complete(seq, ...).
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void on_request(std::uint64_t seq, Request&& request) = 0;
  };

  // Where the request being received stands, for the loop's timeouts.
  enum class Phase : std::uint8_t { kNone, kHeader, kBody };

  // `date` is the Date header value the owner keeps current; it must outlive the connection.
  HttpConnection(const ConnectionLimits& limits, const std::string& date);

  // Bytes from the peer. They are parsed by pump().
  void append_input(std::string_view bytes, std::int64_t now_ns);
  // The peer will send nothing more: requests already complete are still served, a partial one
  // is dropped, and the connection ends once the last answer is written.
  void input_closed() noexcept { eof_ = true; }
  // Parses and hands out as many requests as the limits allow.
  void pump(Handler& handler, std::int64_t now_ns);
  // The answer to request seq. An unknown seq (already answered) is ignored.
  void complete(std::uint64_t seq, const Response& response);
  // Ends the connection after the answers already owed: SIGTERM, or a request that took too long
  // to arrive (answered with `response` after the owed ones, when given).
  void finish(const std::optional<Response>& response);

  // The next bytes to write; stable until sent() is called. Empty: nothing to write now.
  std::string_view begin_send();
  void sent(std::size_t bytes) noexcept;

  // Whether the loop should read from the peer now.
  [[nodiscard]] bool wants_input() const noexcept;
  // Nothing more will be written: the loop may close (gracefully) once the last write is done.
  [[nodiscard]] bool done() const noexcept;
  // No request partly received, none owed, nothing to write: idle-timeout territory.
  [[nodiscard]] bool quiet() const noexcept;
  [[nodiscard]] bool eof() const noexcept { return eof_; }
  // Parsing paused at a limit: we keep the peer waiting, so its request timeouts do not run.
  [[nodiscard]] bool blocked_on_us() const noexcept;
  [[nodiscard]] Phase phase() const noexcept;
  [[nodiscard]] std::int64_t request_started_ns() const noexcept { return request_started_ns_; }
  [[nodiscard]] std::size_t pending() const noexcept { return pending_.size(); }
  [[nodiscard]] std::size_t unsent_bytes() const noexcept {
    return queued_.size() + (sending_.size() - sending_offset_);
  }

 private:
  using Parser = boost::beast::http::request_parser<boost::beast::http::string_body>;

  struct Pending {
    bool ready = false;
    bool head = false;   // HEAD: no body
    bool close = false;  // carries "Connection: close"; nothing is parsed after it
    std::string bytes;   // the serialized response once ready
  };

  Parser& parser();
  void dispatch(Handler& handler);
  void reject(const boost::system::error_code& ec);
  void append_owed(Response response, bool close);
  void maybe_continue();
  void flush_ready();
  [[nodiscard]] bool has_partial() const noexcept;
  [[nodiscard]] bool chunked_tail_too_short() const noexcept;

  ConnectionLimits limits_;
  const std::string& date_;
  std::string in_;               // received, not yet parsed
  std::size_t in_offset_ = 0;    // parsed prefix of in_
  std::optional<Parser> parser_;  // the request being parsed; a fresh one per request
  bool continue_sent_ = false;    // "100 Continue" already sent for the current request
  std::deque<Pending> pending_;   // owed answers in request order; front is seq first_seq_
  std::uint64_t first_seq_ = 0;
  std::string queued_;            // answered bytes waiting behind the write in progress
  std::string sending_;           // the bytes of the write in progress
  std::size_t sending_offset_ = 0;
  bool closing_ = false;          // parse nothing more: a close was asked or an error answered
  bool eof_ = false;
  bool blocked_ = false;          // parsing stopped at a limit
  std::int64_t request_started_ns_ = 0;  // first byte of the partial request (0: none)
};

}  // namespace batchd::http

#include "frontend/connection.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>

#include "text/ascii.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

// Buffers this large are given back once emptied, so an idle connection that once carried a big
// request or answer does not keep the memory.
constexpr std::size_t kKeepCapacityBytes = 64 * 1024;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

Response parse_error_response(const boost::system::error_code& ec) {
  if (ec == beast_http::error::header_limit) {
    return error_response(431, "header_too_large", "the request's header exceeds the server's limit");
  }
  if (ec == beast_http::error::body_limit) {
    return error_response(413, "too_large", "the request's body exceeds the server's limit");
  }
  return error_response(400, "bad_request", "malformed HTTP request: " + ec.message());
}

}  // namespace

HttpConnection::HttpConnection(const ConnectionLimits& limits, const std::string& date)
    : limits_(limits), date_(date) {}

HttpConnection::Parser& HttpConnection::parser() {
  if (!parser_) {
    parser_.emplace();
    parser_->header_limit(limits_.max_header_bytes);
    parser_->body_limit(limits_.max_body_bytes);
    parser_->eager(true);  // parse the body in the same put() as the header ends in
  }
  return *parser_;
}

bool HttpConnection::chunked_tail_too_short() const noexcept {
  // Boost 1.81's parser asserts (wrongly: Beast PR #2861, fixed in a later Boost) that it is
  // handed at least 5 bytes when it resumes after the last chunk's "0\r\n"; a debug build would
  // abort on a request sent in such pieces. Every complete chunked body still has its last chunk
  // ("0\r\n\r\n", 5 bytes) unconsumed, so waiting for 5 bytes never stalls a whole request.
  constexpr std::size_t kLastChunkBytes = 5;
  return parser_ && parser_->is_header_done() && parser_->chunked() && in_.size() - in_offset_ < kLastChunkBytes;
}

bool HttpConnection::has_partial() const noexcept {
  return in_offset_ < in_.size() || (parser_ && parser_->got_some());
}

void HttpConnection::append_input(std::string_view bytes, std::int64_t now_ns) {
  if (bytes.empty() || closing_ || eof_) return;  // nothing after a close is ever parsed
  if (!has_partial()) request_started_ns_ = now_ns;
  if (in_offset_ == in_.size()) {
    if (in_.capacity() > kKeepCapacityBytes) std::string().swap(in_);
    in_.clear();
    in_offset_ = 0;
  } else if (in_offset_ >= kKeepCapacityBytes) {
    in_.erase(0, in_offset_);
    in_offset_ = 0;
  }
  in_.append(bytes);
}

void HttpConnection::pump(Handler& handler, std::int64_t now_ns) {
  while (!closing_) {
    if (pending_.size() >= limits_.max_pending || unsent_bytes() >= limits_.max_unsent_bytes) {
      blocked_ = true;
      return;
    }
    if (blocked_) {
      blocked_ = false;
      // The peer waited on us, not we on it: the clock for its next request starts now.
      if (has_partial()) request_started_ns_ = now_ns;
    }
    if (in_offset_ == in_.size() || chunked_tail_too_short()) {
      maybe_continue();
      break;
    }
    boost::system::error_code ec;
    const std::size_t used =
        parser().put(boost::asio::const_buffer(in_.data() + in_offset_, in_.size() - in_offset_), ec);
    in_offset_ += used;
    if (ec == beast_http::error::need_more) {
      maybe_continue();
      break;
    }
    if (ec) {
      reject(ec);
      return;
    }
    if (!parser_->is_done()) {
      if (used == 0) break;
      continue;
    }
    dispatch(handler);
    request_started_ns_ = in_offset_ < in_.size() ? now_ns : 0;
  }
  if (eof_ && !blocked_) closing_ = true;  // what is left is a request that will never finish
}

void HttpConnection::dispatch(Handler& handler) {
  Request request = parser_->release();
  parser_.reset();
  continue_sent_ = false;
  Pending& owed = pending_.emplace_back();
  owed.head = request.method() == beast_http::verb::head;
  owed.close = !request.keep_alive();
  if (owed.close) closing_ = true;
  const std::uint64_t seq = first_seq_ + pending_.size() - 1;
  handler.on_request(seq, std::move(request));  // may complete(seq) before it returns
}

void HttpConnection::reject(const boost::system::error_code& ec) {
  parser_.reset();
  append_owed(parse_error_response(ec), true);
}

void HttpConnection::append_owed(Response response, bool close) {
  Pending& owed = pending_.emplace_back();
  owed.ready = true;
  owed.close = close;
  serialize(response, Framing{false, close, date_}, owed.bytes);
  if (close) closing_ = true;
  flush_ready();
}

void HttpConnection::maybe_continue() {
  // Only when nothing is owed ahead of it: the interim response must not overtake an answer.
  if (continue_sent_ || !parser_ || !parser_->is_header_done() || parser_->is_done() ||
      !pending_.empty() || unsent_bytes() != 0) {
    return;
  }
  const Request& request = parser_->get();
  const auto expect = request[beast_http::field::expect];
  if (request.version() >= 11 && text::iequals(std::string_view(expect.data(), expect.size()), "100-continue")) {
    queued_.append(kContinue);
    continue_sent_ = true;
  }
}

void HttpConnection::complete(std::uint64_t seq, const Response& response) {
  if (seq < first_seq_ || seq - first_seq_ >= pending_.size()) return;
  Pending& owed = pending_[seq - first_seq_];
  if (owed.ready) return;
  owed.ready = true;
  serialize(response, Framing{owed.head, owed.close, date_}, owed.bytes);
  flush_ready();
}

void HttpConnection::flush_ready() {
  while (!pending_.empty() && pending_.front().ready) {
    queued_.append(pending_.front().bytes);
    pending_.pop_front();
    ++first_seq_;
  }
}

void HttpConnection::finish(const std::optional<Response>& response) {
  if (closing_ && !response) return;
  if (response && !closing_) {
    append_owed(*response, true);
    return;
  }
  closing_ = true;
  if (!pending_.empty() && !pending_.back().ready) pending_.back().close = true;
}

std::string_view HttpConnection::begin_send() {
  if (sending_offset_ < sending_.size()) {
    return std::string_view(sending_).substr(sending_offset_);
  }
  sending_.clear();
  sending_offset_ = 0;
  if (queued_.empty()) return {};
  sending_.swap(queued_);
  return sending_;
}

void HttpConnection::sent(std::size_t bytes) noexcept {
  sending_offset_ = std::min(sending_.size(), sending_offset_ + bytes);
  if (sending_offset_ < sending_.size()) return;
  if (sending_.capacity() > kKeepCapacityBytes) {
    std::string().swap(sending_);
  } else {
    sending_.clear();
  }
  sending_offset_ = 0;
}

bool HttpConnection::wants_input() const noexcept {
  return !eof_ && !closing_ && pending_.size() < limits_.max_pending &&
         unsent_bytes() < limits_.max_unsent_bytes;
}

bool HttpConnection::done() const noexcept {
  return closing_ && pending_.empty() && unsent_bytes() == 0;
}

bool HttpConnection::quiet() const noexcept {
  return !has_partial() && pending_.empty() && unsent_bytes() == 0;
}

bool HttpConnection::blocked_on_us() const noexcept { return blocked_; }

HttpConnection::Phase HttpConnection::phase() const noexcept {
  if (!has_partial()) return Phase::kNone;
  return parser_ && parser_->is_header_done() ? Phase::kBody : Phase::kHeader;
}

}  // namespace batchd::http

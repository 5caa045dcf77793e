#include "tools/stress_http_response.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <cstring>

#include "tools/stress_stats.hpp"

namespace batchd::stress::http {

namespace {

namespace beast_http = boost::beast::http;

// Far above anything a front-end sends back; a response beyond these is broken, and refusing it
// keeps one bad connection from eating the load generator's memory.
constexpr std::uint32_t kMaxHeaderBytes = 64 * 1024;
constexpr std::uint64_t kMaxBodyBytes = 64 * 1024 * 1024;

bool string_of(simdjson::ondemand::value& value, std::string_view& out) {
  simdjson::ondemand::json_type type{};
  return value.type().get(type) == simdjson::SUCCESS &&
         type == simdjson::ondemand::json_type::string &&
         value.get_string().get(out) == simdjson::SUCCESS;
}

// {"error": "CODE"} or {"error": {"code": "CODE", ...}}.
bool code_of_error_value(simdjson::ondemand::value& error, std::string_view& code) {
  if (string_of(error, code)) return true;
  simdjson::ondemand::object object;
  if (error.get_object().get(object) != simdjson::SUCCESS) return false;
  for (auto field : object) {
    std::string_view key;
    simdjson::ondemand::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) return false;
    if (key == "code") return string_of(value, code);
  }
  return false;
}

}  // namespace

ResponseReader::Parser& ResponseReader::fresh_parser() {
  parser_.emplace();
  parser_->header_limit(kMaxHeaderBytes);
  parser_->body_limit(kMaxBodyBytes);
  parser_->eager(true);  // parse the body in the same put() as the header ends in
  return *parser_;
}

bool ResponseReader::chunked_tail_too_short(std::size_t available) const noexcept {
  // Boost 1.81's parser asserts (wrongly: Beast PR #2861) that it is handed at least 5 bytes
  // when it resumes after the last chunk's "0\r\n"; a build with assertions would abort on a
  // response that arrived in such pieces. The parser takes none of the last chunk ("0\r\n\r\n",
  // 5 bytes) until it has all of it, so waiting for 5 bytes never stalls a whole response (as
  // in frontend/connection.cpp).
  constexpr std::size_t kLastChunkBytes = 5;
  return parser_->is_header_done() && parser_->chunked() && available < kLastChunkBytes;
}

ResponseReader::Step ResponseReader::read(std::string_view data, std::size_t& used) {
  used = 0;
  if (!parser_ || parser_->is_done()) fresh_parser();
  while (used < data.size() && !chunked_tail_too_short(data.size() - used)) {
    boost::system::error_code ec;
    const std::size_t n =
        parser_->put(boost::asio::const_buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == beast_http::error::need_more) return Step::kNeedMore;
    if (ec) {
      problem_ = ec.message();
      return Step::kBad;
    }
    if (parser_->is_done()) return Step::kDone;
    if (n == 0) break;
  }
  return Step::kNeedMore;
}

ResponseReader::Step ResponseReader::read_eof() {
  if (!parser_ || parser_->is_done() || !parser_->got_some()) return Step::kNeedMore;
  boost::system::error_code ec;
  parser_->put_eof(ec);
  if (ec) {
    problem_ = ec.message();
    return Step::kBad;
  }
  return Step::kDone;
}

std::size_t error_kind_of_status(int status) noexcept {
  switch (status) {
    case 503: return error_kind(ErrorCode::kOverloaded);
    case 504: return error_kind(ErrorCode::kTimeout);
    case 500: return error_kind(ErrorCode::kBackendError);
    case 413: return error_kind(ErrorCode::kTooLarge);
    case 400: return kBadRequestKind;
    default: return error_kind(ErrorCode::kProtocolError);
  }
}

simdjson::padded_string_view BodyDecoder::padded(std::string_view body) {
  if (padded_.size() < body.size() + simdjson::SIMDJSON_PADDING) {
    padded_.resize(body.size() + simdjson::SIMDJSON_PADDING);
  }
  std::memcpy(padded_.data(), body.data(), body.size());
  return simdjson::padded_string_view(padded_.data(), body.size(), padded_.size());
}

std::size_t BodyDecoder::error_kind_of(int status, std::string_view body) {
  // The body's code, when it names one of our kinds, is more precise than the status: 503 is
  // both overloaded and daemon_unavailable, 400 both invalid_utf8 and a malformed request.
  simdjson::ondemand::document doc;
  simdjson::ondemand::object root;
  if (parser_.iterate(padded(body)).get(doc) || doc.get_object().get(root)) {
    return error_kind_of_status(status);
  }
  std::string_view code;
  for (auto field : root) {
    std::string_view key;
    simdjson::ondemand::value value;
    if (field.unescaped_key().get(key) || field.value().get(value)) break;
    const bool found = (key == "code" && string_of(value, code)) ||
                       (key == "error" && code_of_error_value(value, code));
    if (found) {
      if (const std::size_t kind = error_kind_by_name(code); kind < kErrorKinds) return kind;
      break;
    }
  }
  return error_kind_of_status(status);
}

bool BodyDecoder::output_of(simdjson::ondemand::document& doc, std::string_view& output) {
  if (api_ == Api::kV1 || api_ == Api::kJobs) return doc["output"].get_string().get(output) == simdjson::SUCCESS;
  // {"outputs": [{"name": "OUTPUT", ..., "data": ["..."]}]}: the one string of the one output.
  simdjson::ondemand::array outputs;
  if (doc["outputs"].get_array().get(outputs) != simdjson::SUCCESS) return false;
  for (auto tensor : outputs) {
    simdjson::ondemand::array data;
    if (tensor["data"].get_array().get(data) != simdjson::SUCCESS) return false;
    for (auto element : data) return element.get_string().get(output) == simdjson::SUCCESS;
    return false;
  }
  return false;
}

std::string_view BodyDecoder::job_id(std::string_view body) {
  simdjson::ondemand::document doc;
  std::string_view id;
  if (parser_.iterate(padded(body)).get(doc) != simdjson::SUCCESS) return {};
  if (doc["id"].get_string().get(id) != simdjson::SUCCESS) return {};
  return id;
}

bool BodyDecoder::job_pending(std::string_view body) {
  simdjson::ondemand::document doc;
  std::string_view state;
  return parser_.iterate(padded(body)).get(doc) == simdjson::SUCCESS &&
         doc["status"].get_string().get(state) == simdjson::SUCCESS && state == "pending";
}

Outcome BodyDecoder::decode(int status, std::string_view body) {
  Outcome outcome;
  if (status != 200) {
    outcome.error_kind = error_kind_of(status, body);
    return outcome;
  }
  if (api_ == Api::kJobs) {
    simdjson::ondemand::document doc;
    std::string_view state;
    if (parser_.iterate(padded(body)).get(doc) != simdjson::SUCCESS ||
        doc["status"].get_string().get(state) != simdjson::SUCCESS) {
      outcome.error_kind = error_kind(ErrorCode::kProtocolError);
      return outcome;
    }
    if (state != "done") {  // failed or expired: its error's code says which kind
      outcome.error_kind = state == "expired" ? error_kind(ErrorCode::kTimeout) : error_kind_of(500, body);
      return outcome;
    }
  }
  simdjson::ondemand::document doc;
  std::string_view output;
  if (parser_.iterate(padded(body)).get(doc) != simdjson::SUCCESS || !output_of(doc, output)) {
    outcome.error_kind = error_kind(ErrorCode::kProtocolError);
    return outcome;
  }
  outcome.answered = true;
  outcome.output = output;
  return outcome;
}

}  // namespace batchd::stress::http

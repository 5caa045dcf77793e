#include "tools/stress_http_proto.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>

#include "text/ascii.hpp"
#include "text/json_escape.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress::http {

namespace {

constexpr std::string_view kDefaultTarget = "/v1/batchstring";
// Far above anything a front-end sends back; a response beyond these is broken, and refusing it
// keeps one bad connection from eating the load generator's memory.
constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
constexpr std::size_t kMaxBodyBytes = 64 * 1024 * 1024;

bool parse_decimal(std::string_view s, std::size_t& value) noexcept {
  if (s.empty() || s.size() > 18) return false;  // 18 digits cannot overflow 64 bits
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size();
}

// Splits "HOST[:PORT]" or "[V6]:PORT" into url.host and url.port.
std::string split_authority(std::string_view authority, Url& url) {
  std::string_view host = authority, port = "80";
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return "unclosed '[' in the host";
    host = authority.substr(1, close - 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return "unexpected text after ']'";
    if (!rest.empty()) port = rest.substr(1);
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return "an IPv6 address needs brackets: [ADDR]:PORT";
  }
  std::size_t number = 0;
  if (host.empty()) return "no host";
  if (!parse_decimal(port, number) || number == 0 || number > 65535) return "bad port";
  url.host = host;
  url.port = port;
  return {};
}

// What the header lines say about framing.
struct HeaderFacts {
  std::optional<std::size_t> content_length;
  bool close = false;
};

// "HTTP/1.x SSS[ reason]": sets status and the version's default for closing.
const char* parse_status_line(std::string_view line, int& status, bool& close) {
  constexpr std::string_view kPrefix = "HTTP/1.";
  if (line.size() < 12 || line.substr(0, kPrefix.size()) != kPrefix || line[8] != ' ' ||
      (line.size() > 12 && line[12] != ' ')) {
    return "malformed status line";
  }
  std::size_t code = 0;
  if (!parse_decimal(line.substr(9, 3), code) || code < 100) return "malformed status code";
  status = static_cast<int>(code);
  close = line[7] == '0';  // HTTP/1.0 closes unless it says keep-alive
  return nullptr;
}

const char* parse_header_line(std::string_view line, HeaderFacts& facts) {
  const std::size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0 || line.front() == ' ' || line.front() == '\t') {
    return "malformed header line";
  }
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = text::trim(line.substr(colon + 1));
  if (text::iequals(name, "content-length")) {
    std::size_t length = 0;
    if (!parse_decimal(value, length)) return "malformed Content-Length";
    if (facts.content_length && *facts.content_length != length) return "conflicting Content-Length";
    facts.content_length = length;
  } else if (text::iequals(name, "transfer-encoding") && !text::iequals(value, "identity")) {
    return "Transfer-Encoding (chunked) responses are not supported: send Content-Length";
  } else if (text::iequals(name, "connection")) {
    // A token list; "close" and "keep-alive" are the only ones that matter here.
    for (std::size_t start = 0; start <= value.size();) {
      const std::size_t comma = std::min(value.find(',', start), value.size());
      const std::string_view token = text::trim(value.substr(start, comma - start));
      if (text::iequals(token, "close")) facts.close = true;
      if (text::iequals(token, "keep-alive")) facts.close = false;
      start = comma + 1;
    }
  }
  return nullptr;
}

// Parses the status line and headers (each line ending in CRLF) into r and facts.
const char* parse_head(std::string_view head, Response& r, HeaderFacts& facts) {
  std::size_t eol = head.find("\r\n");
  if (const char* why = parse_status_line(head.substr(0, eol), r.status, facts.close)) return why;
  for (std::size_t start = eol + 2; start < head.size(); start = eol + 2) {
    eol = head.find("\r\n", start);
    if (const char* why = parse_header_line(head.substr(start, eol - start), facts)) return why;
  }
  return nullptr;
}

Response bad(const char* why) {
  Response r;
  r.framing = Framing::kBad;
  r.problem = why;
  return r;
}

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

std::string parse_url(std::string_view text, Url& url) {
  constexpr std::string_view kScheme = "http://";
  if (text.substr(0, 8) == "https://") return "https is not supported: give the plain http:// URL";
  if (text.substr(0, kScheme.size()) != kScheme) return "expected http://HOST[:PORT][/PATH]";
  text.remove_prefix(kScheme.size());
  const std::size_t slash = std::min(text.find('/'), text.size());
  const std::string_view authority = text.substr(0, slash);
  const std::string_view path = text.substr(slash);
  if (authority.find('@') != std::string_view::npos) return "user info in the URL is not supported";
  if (std::any_of(text.begin(), text.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == '#' || c == 0x7F;
      })) {
    return "spaces, control characters and fragments are not allowed in the URL";
  }
  if (std::string why = split_authority(authority, url); !why.empty()) return why;
  url.host_header = authority;
  url.target = path.empty() || path == "/" ? kDefaultTarget : path;
  return {};
}

RequestEncoder::RequestEncoder(const Url& url, std::chrono::milliseconds server_timeout) {
  head_ = "POST " + url.target + " HTTP/1.1\r\nHost: " + url.host_header +
          "\r\nContent-Type: application/json\r\nX-Timeout-Ms: " +
          std::to_string(server_timeout.count()) + "\r\nContent-Length: ";
}

void RequestEncoder::append(std::string& out, std::string_view input) {
  body_.assign(R"({"input":")");
  text::append_json_escaped(input, body_);
  body_.append(R"("})");
  char length[24];
  const auto [end, ec] = std::to_chars(length, length + sizeof(length), body_.size());
  out.append(head_);
  out.append(length, end);
  out.append("\r\n\r\n");
  out.append(body_);
}

Response frame_response(std::string_view data) {
  const std::size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos || end > kMaxHeaderBytes) {
    if (data.size() > kMaxHeaderBytes) return bad("response headers exceed 64 KiB");
    return Response{};
  }
  Response r;
  HeaderFacts facts;
  if (const char* why = parse_head(data.substr(0, end + 2), r, facts)) return bad(why);
  r.close = facts.close;
  r.body_offset = end + 4;
  // 1xx, 204 and 304 never have a body, whatever the headers say.
  const bool bodiless = r.status < 200 || r.status == 204 || r.status == 304;
  if (!bodiless && !facts.content_length) {
    return bad("response without Content-Length (bodies ended by closing are not supported)");
  }
  r.body_bytes = bodiless ? 0 : *facts.content_length;
  if (r.body_bytes > kMaxBodyBytes) return bad("response body exceeds 64 MiB");
  r.total_bytes = r.body_offset + r.body_bytes;
  if (data.size() < r.total_bytes) return Response{};
  r.framing = Framing::kComplete;
  return r;
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

Outcome BodyDecoder::decode(int status, std::string_view body) {
  Outcome outcome;
  if (status != 200) {
    outcome.error_kind = error_kind_of(status, body);
    return outcome;
  }
  simdjson::ondemand::document doc;
  std::string_view output;
  if (parser_.iterate(padded(body)).get(doc) != simdjson::SUCCESS ||
      doc["output"].get_string().get(output) != simdjson::SUCCESS) {
    outcome.error_kind = error_kind(ErrorCode::kProtocolError);
    return outcome;
  }
  outcome.answered = true;
  outcome.output = output;
  return outcome;
}

}  // namespace batchd::stress::http

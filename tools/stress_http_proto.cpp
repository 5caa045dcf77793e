#include "tools/stress_http_proto.hpp"

#include <algorithm>
#include <charconv>

#include "oip/model.hpp"
#include "text/json_escape.hpp"

namespace batchd::stress::http {

namespace {

bool parse_decimal(std::string_view s, std::size_t& value) noexcept {
  if (s.empty() || s.size() > 18) return false;  // 18 digits cannot overflow 64 bits
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size();
}

Failure unusable(std::string_view why) {
  return make_failure(std::errc::invalid_argument, std::string(why));
}

// Splits "HOST[:PORT]" or "[V6]:PORT" into a URL's host and port.
Expected<Url> split_authority(std::string_view authority) {
  std::string_view host = authority, port = "80";
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) return unusable("unclosed '[' in the host");
    host = authority.substr(1, close - 1);
    const std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return unusable("unexpected text after ']'");
    if (!rest.empty()) port = rest.substr(1);
  } else if (const std::size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return unusable("an IPv6 address needs brackets: [ADDR]:PORT");
    }
  }
  std::size_t number = 0;
  if (host.empty()) return unusable("no host");
  if (!parse_decimal(port, number) || number == 0 || number > 65535) return unusable("bad port");
  Url url;
  url.host = host;
  url.port = port;
  return url;
}

}  // namespace

std::string default_target(Api api) {
  if (api == Api::kV1) return "/v1/batchstring";
  if (api == Api::kJobs) return "/v1/jobs";
  return "/v2/models/" + oip::default_model().name + "/infer";
}

Expected<Url> parse_url(std::string_view text, Api api) {
  constexpr std::string_view kScheme = "http://";
  if (text.substr(0, 8) == "https://") {
    return unusable("https is not supported: give the plain http:// URL");
  }
  if (text.substr(0, kScheme.size()) != kScheme) return unusable("expected http://HOST[:PORT][/PATH]");
  text.remove_prefix(kScheme.size());
  const std::size_t slash = std::min(text.find('/'), text.size());
  const std::string_view authority = text.substr(0, slash);
  const std::string_view path = text.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return unusable("user info in the URL is not supported");
  }
  if (std::any_of(text.begin(), text.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == '#' || c == 0x7F;
      })) {
    return unusable("spaces, control characters and fragments are not allowed in the URL");
  }
  Expected<Url> url = split_authority(authority);
  if (!url) return url;
  url->host_header = authority;
  url->target = path.empty() || path == "/" ? default_target(api) : std::string(path);
  return url;
}

RequestEncoder::RequestEncoder(const Url& url, std::chrono::milliseconds server_timeout, Api api) {
  if (api == Api::kV1 || api == Api::kJobs) {
    body_open_ = R"({"input":")";
    body_close_ = R"("})";
  } else {
    // The Open Inference Protocol's JSON tensor of one string, shape [1, 1].
    body_open_ = R"({"inputs":[{"name":")" + oip::default_model().input + R"(","shape":[1,1],"datatype":")" +
                 std::string(oip::kBytesType) + R"(","data":[")";
    body_close_ = R"("]}]})";
  }
  head_ = "POST " + url.target + " HTTP/1.1\r\nHost: " + url.host_header +
          "\r\nContent-Type: application/json\r\nX-Timeout-Ms: " +
          std::to_string(server_timeout.count()) + "\r\n";
}

void RequestEncoder::append(std::string& out, std::string_view input, Priority priority) {
  body_.assign(body_open_);
  text::append_json_escaped(input, body_);
  body_.append(body_close_);
  char length[24];
  const auto [end, ec] = std::to_chars(length, length + sizeof(length), body_.size());
  out.append(head_);
  if (priority != Priority::kNormal) {
    out.append("X-Priority: ");
    out.append(priority_name(priority));
    out.append("\r\n");
  }
  out.append("Content-Length: ");
  out.append(length, end);
  out.append("\r\n\r\n");
  out.append(body_);
}

std::string poll_request(const Url& url, std::string_view job_id) {
  std::string out = "GET " + url.target + "/";
  out.append(job_id);
  out.append(" HTTP/1.1\r\nHost: " + url.host_header + "\r\n\r\n");
  return out;
}

}  // namespace batchd::stress::http

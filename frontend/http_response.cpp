#include "frontend/http_response.hpp"

#include <ctime>

#include "text/json_escape.hpp"

namespace batchd::http {

std::string_view reason_phrase(unsigned status) noexcept {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

void serialize(const Response& response, const Framing& framing, std::string& out) {
  out.append("HTTP/1.1 ");
  out.append(std::to_string(response.status));
  out.push_back(' ');
  out.append(reason_phrase(response.status));
  out.append("\r\nContent-Type: ");
  out.append(response.content_type);
  out.append("\r\nContent-Length: ");
  out.append(std::to_string(response.body.size()));
  if (!framing.date.empty()) {
    out.append("\r\nDate: ");
    out.append(framing.date);
  }
  if (response.retry_after_s != 0) {
    out.append("\r\nRetry-After: ");
    out.append(std::to_string(response.retry_after_s));
  }
  if (!response.allow.empty()) {
    out.append("\r\nAllow: ");
    out.append(response.allow);
  }
  if (!response.location.empty()) {
    out.append("\r\nLocation: ");
    out.append(response.location);
  }
  if (response.inference_header_length != 0) {
    out.append("\r\nInference-Header-Content-Length: ");
    out.append(std::to_string(response.inference_header_length));
  }
  if (framing.close) out.append("\r\nConnection: close");
  out.append("\r\n\r\n");
  if (!framing.head) out.append(response.body);
}

Response error_response(unsigned status, std::string_view code, std::string_view message,
                        unsigned retry_after_s) {
  Response response;
  response.status = status;
  response.retry_after_s = retry_after_s;
  response.body.reserve(40 + code.size() + message.size());
  response.body.append(R"({"error":{"code":")");
  text::append_json_escaped(code, response.body);
  response.body.append(R"(","message":")");
  // A message may quote what the caller sent (a path), which need not be UTF-8; the body must be.
  text::append_json_escaped_lossy(message, response.body);
  response.body.append("\"}}");
  return response;
}

std::string http_date(std::int64_t unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[64];
  // The C locale's names are the ones RFC 9110 requires; the process never changes its locale.
  const std::size_t n = std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}

Response method_not_allowed(std::string_view allow) {
  Response response =
      error_response(405, "method_not_allowed", "this resource allows only " + std::string(allow));
  response.allow = allow;
  return response;
}

std::string_view path_of(std::string_view target) noexcept {
  const std::size_t query = target.find('?');
  return query == std::string_view::npos ? target : target.substr(0, query);
}

}  // namespace batchd::http

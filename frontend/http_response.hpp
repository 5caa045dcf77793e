// An HTTP response as the API layer builds it, its serialization to HTTP/1.1 bytes, and the JSON
// bodies every endpoint uses. No I/O here: the fuzz target links this file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace batchd::http {

inline constexpr std::string_view kJsonType = "application/json";
inline constexpr std::string_view kTextType = "text/plain; charset=utf-8";
inline constexpr std::string_view kPrometheusType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr std::string_view kOctetStreamType = "application/octet-stream";

struct Response {
  unsigned status = 200;
  std::string_view content_type = kJsonType;  // always a literal, so a view is enough
  std::string body;
  unsigned retry_after_s = 0;   // 0: no Retry-After header
  std::string_view allow;       // non-empty: an Allow header (405)
  std::string location;         // non-empty: a Location header (202 for a new job)
  // Non-zero: the body is a JSON header this long followed by binary tensor data (the Open
  // Inference Protocol's Inference-Header-Content-Length).
  std::size_t inference_header_length = 0;
};

// How the connection wants the response framed.
struct Framing {
  bool head = false;    // answer to HEAD: headers only, Content-Length of the full body
  bool close = false;   // the last response on this connection: "Connection: close"
  std::string_view date;  // the Date header's value; empty: none
};

// The reason phrase for a status ("Not Found"); "Unknown" for codes the server never sends.
std::string_view reason_phrase(unsigned status) noexcept;

// Appends the response's status line, headers and (unless HEAD) body to out.
void serialize(const Response& response, const Framing& framing, std::string& out);

// {"error":{"code":CODE,"message":MESSAGE}} with the given status. CODE is ASCII; MESSAGE may
// hold any bytes (those that are not UTF-8 show as '?').
Response error_response(unsigned status, std::string_view code, std::string_view message,
                        unsigned retry_after_s = 0);

// 405 with the Allow header: what the resource allows ("GET, HEAD").
Response method_not_allowed(std::string_view allow);

// A request target's path: what comes before the query string, if any.
std::string_view path_of(std::string_view target) noexcept;

// The Date header value for a wall-clock time, as RFC 9110 wants it ("Sun, 06 Nov 1994 08:49:37 GMT").
std::string http_date(std::int64_t unix_seconds);

}  // namespace batchd::http

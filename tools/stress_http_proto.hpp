// The HTTP/1.1 wire format batchd-stress speaks to an HTTP front-end: the base URL, request
// encoding (JSON body), response framing (status line, headers, Content-Length) and reading an
// answer or an error kind out of a response body. No sockets here, so it can be checked alone.
#pragma once

#include <simdjson.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace batchd::stress::http {

struct Url {
  std::string host;         // name or address, IPv6 without brackets
  std::string port;         // "80" when the URL names none
  std::string target;       // request target: the URL's path, or /v1/batchstring without one
  std::string host_header;  // the Host header's value, as written in the URL
};

// Parses "http://HOST[:PORT][/PATH]". Returns why it cannot be used, or an empty string.
std::string parse_url(std::string_view text, Url& url);

// Builds complete POST requests. One per thread: it keeps a scratch buffer.
class RequestEncoder {
 public:
  RequestEncoder(const Url& url, std::chrono::milliseconds server_timeout);
  // Appends one request whose body is {"input": input}.
  void append(std::string& out, std::string_view input);

 private:
  std::string head_;  // request line and fixed headers, up to "Content-Length: "
  std::string body_;
};

enum class Framing {
  kIncomplete,  // more bytes needed
  kComplete,    // one whole response is at the front of the data
  kBad,         // cannot be framed: the connection is unusable
};

struct Response {
  Framing framing = Framing::kIncomplete;
  int status = 0;
  std::size_t body_offset = 0;
  std::size_t body_bytes = 0;
  std::size_t total_bytes = 0;  // status line, headers and body: what to consume
  bool close = false;           // the server closes the connection after this response
  const char* problem = "";     // kBad: what is wrong, for a person
};

// Frames the response at the front of `data`. A 1xx response comes back complete with its
// status; the caller skips it (it answers no request).
Response frame_response(std::string_view data);

// What a response means for its request.
struct Outcome {
  bool answered = false;        // 200 with an output (right or wrong: the caller checks)
  std::string_view output;      // valid until the next decode()
  std::size_t error_kind = 0;   // when !answered: an index of tools/stress_stats.hpp's kinds
};

// Reads response bodies with simdjson. One per thread: it reuses its parser and buffer.
class BodyDecoder {
 public:
  Outcome decode(int status, std::string_view body);

 private:
  std::size_t error_kind_of(int status, std::string_view body);
  // Copies body into padded_ (simdjson reads a little past the end) and returns its view.
  simdjson::padded_string_view padded(std::string_view body);

  simdjson::ondemand::parser parser_;
  std::string padded_;
};

// The error kind for an HTTP error status when the body names no known code.
std::size_t error_kind_of_status(int status) noexcept;

}  // namespace batchd::stress::http

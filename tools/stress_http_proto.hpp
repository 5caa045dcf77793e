// The requests batchd-stress sends to an HTTP front-end: the base URL and the encoding of a POST
// with a JSON body, in batchd's own API or the Open Inference Protocol's (responses:
// stress_http_response.hpp). No sockets here, so it can be checked alone.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "client_lib/client.hpp"

namespace batchd::stress::http {

// Which API the requests speak: batchd's own (POST {"input": ...} to /v1/batchstring, answered
// {"output": ...}), the Open Inference Protocol's (a BYTES tensor of one string posted to
// /v2/models/batchstring/infer, answered with an output tensor), or batchd's asynchronous jobs
// (POST {"input": ...} to /v1/jobs, answered 202 with an id, then GET /v1/jobs/{id} until done).
enum class Api { kV1, kV2, kJobs };

// Where each API's requests go when the URL names no path.
std::string default_target(Api api);

struct Url {
  std::string host;         // name or address, IPv6 without brackets
  std::string port;         // "80" when the URL names none
  std::string target;       // request target: the URL's path, or the API's default without one
  std::string host_header;  // the Host header's value, as written in the URL
};

// Parses "http://HOST[:PORT][/PATH]", or says (EINVAL) why it cannot be used.
Expected<Url> parse_url(std::string_view text, Api api = Api::kV1);

// Builds complete POST requests. One per thread: it keeps a scratch buffer.
class RequestEncoder {
 public:
  RequestEncoder(const Url& url, std::chrono::milliseconds server_timeout, Api api = Api::kV1);
  // Appends one request whose body carries input in the API's form, with X-Priority unless it is
  // normal (which a server assumes without one, so a server that knows no classes is loaded as
  // before).
  void append(std::string& out, std::string_view input, Priority priority);

 private:
  std::string head_;  // request line and fixed headers, up to the priority and Content-Length
  std::string body_;
  std::string body_open_;   // the body up to the escaped input ...
  std::string body_close_;  // ... and after it
};

// GET {url.target}/{job_id}: a job's poll.
std::string poll_request(const Url& url, std::string_view job_id);

}  // namespace batchd::stress::http

// The HTTP API: which request goes where, what it must look like, and which response each outcome
// gets. Free of io_uring and of the daemon connection (those sit behind ApiContext), so unit tests
// and the fuzz target drive it directly.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <simdjson.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "oip/errors.hpp"

#include "client_lib/client.hpp"
#include "oip/infer_counters.hpp"
#include "oip/model.hpp"
#include "frontend/http_response.hpp"

namespace batchd::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// How the caller sent its input, and so how its answer is written.
enum class BodyFormat : std::uint8_t { kJson, kText };

// A batchstring request that passed every check here and now goes to the daemon.
struct SubmitAction {
  std::string input;
  std::chrono::milliseconds timeout;
  BodyFormat format;
  Priority priority = Priority::kNormal;  // X-Priority, or the JSON body's "priority"
  std::string model;                      // /v1/models/{model}; empty: the default model
};

using Action = std::variant<Response, SubmitAction>;

struct Readiness {
  bool ready = false;
  std::string_view code;  // why not ("daemon_unavailable", "overloaded", ...); empty when ready
  std::string message;
};

// The Open Inference Protocol's inference statistics (/v2/models/stats).
using InferStatistics = oip::InferStatistics;

// What the API needs from the process around it. Called on the event loop's thread.
class ApiContext {
 public:
  virtual ~ApiContext() = default;
  virtual Readiness readiness() = 0;
  virtual std::string metrics_text() = 0;
  // The daemon's largest input, or 0 while no daemon is attached (the client checks again).
  virtual std::uint32_t max_input_bytes() = 0;
  // This front-end's inferences of a model (by its id), and the daemon's times for each model (by
  // id; empty while no daemon is attached).
  virtual InferStatistics infer_statistics(std::uint32_t model) = 0;
  virtual std::vector<oip::ModelTimes> model_times() = 0;
  // The models requests may name.
  virtual const oip::ModelCatalog& models() = 0;
};

struct ApiLimits {
  std::chrono::milliseconds default_timeout{5000};  // without X-Timeout-Ms
  std::chrono::milliseconds max_timeout{60000};     // X-Timeout-Ms is capped to this
  std::size_t max_body_bytes = 1 << 20;             // the JSON parser's capacity
};

// One per event loop: it owns a JSON parser whose buffers are reused between requests.
class Api {
 public:
  Api(const ApiLimits& limits, ApiContext& context);

  // Decides what to do with one complete request: answer now, or submit its input.
  Action route(const Request& request);

 private:
  Action batchstring(const Request& request);
  // The input and, if the body names one, its class; `header_priority` is X-Priority's, if any.
  Action parse_json_input(const Request& request, std::chrono::milliseconds timeout,
                          std::optional<Priority> header_priority);
  Response readyz();

  ApiLimits limits_;
  ApiContext& context_;  // borrowed; outlives the Api
  simdjson::dom::parser json_;
};

// The checks the batchstring and jobs endpoints share. Each returns the 400 answer when the
// request fails it, and nothing (having filled its out-parameter) when it passes.
// X-Timeout-Ms, capped at limits.max_timeout; limits.default_timeout without it.
std::optional<Response> read_timeout(const Request& request, const ApiLimits& limits,
                                     std::chrono::milliseconds& timeout);
// X-Priority, if any.
std::optional<Response> read_header_priority(const Request& request, std::optional<Priority>& priority);
// The JSON body's "priority", if any; it must agree with `priority` when that is already set.
std::optional<Response> read_json_priority(simdjson::dom::object root, std::optional<Priority>& priority);
// The body parsed as a JSON object into `root` (the 400 for anything else: invalid_json,
// invalid_utf8, bad_request naming `expected`).
std::optional<Response> read_json_object(simdjson::dom::parser& parser, const std::string& body,
                                         std::string_view expected, simdjson::dom::object& root);

// The response for an answered request: 200 with the output, or the error's mapping.
Response response_for_result(Result&& result, BodyFormat format, oip::OverloadStatus overload);

// The one table from client-library errors to HTTP: status, code, Retry-After. `overload` is the
// status of a request shed for want of room (--overload-status).
Response response_for_error(const Error& error, oip::OverloadStatus overload);

}  // namespace batchd::http

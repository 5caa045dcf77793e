#include "frontend/http_api.hpp"

#include <algorithm>
#include <charconv>

#include "frontend/openapi_spec.hpp"
#include "oip/model.hpp"
#include "text/ascii.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

// text/plain (any parameters, e.g. charset) asks for plain text; anything else is read as JSON,
// since a JSON body often arrives mislabelled (curl -d sends application/x-www-form-urlencoded),
// and a body that is not JSON gets a clear 400 either way.
bool is_text_plain(std::string_view content_type) {
  return text::iequals(text::trim(content_type.substr(0, content_type.find(';'))), "text/plain");
}

bool is_get(const Request& request) {
  return request.method() == beast_http::verb::get || request.method() == beast_http::verb::head;
}

Response bad_priority(std::string_view where, std::string_view value) {
  std::string message(where);
  message.append(" must be high, normal or low, not \"");
  message.append(value.substr(0, 64));  // a long value is not echoed whole
  message.append("\"");
  return error_response(400, "bad_priority", message);
}

Response json_ok(std::string body) {
  Response response;
  response.body = std::move(body);
  return response;
}

}  // namespace

Api::Api(const ApiLimits& limits, ApiContext& context)
    : limits_(limits), context_(context), json_(std::max<std::size_t>(limits.max_body_bytes, 64)) {}

Action Api::route(const Request& request) {
  const std::string_view path = path_of(std::string_view(request.target().data(), request.target().size()));
  if (path == "/v1/batchstring") {
    if (request.method() != beast_http::verb::post) return method_not_allowed("POST");
    return batchstring(request);
  }
  if (constexpr std::string_view kModels = "/v1/models/"; path.starts_with(kModels)) {
    if (request.method() != beast_http::verb::post) return method_not_allowed("POST");
    const oip::ModelCatalog::Lookup found = context_.models().find(path.substr(kModels.size()), {});
    if (!found.model) return error_response(404, "unknown_model", found.error);
    Action action = batchstring(request);
    if (auto* submit = std::get_if<SubmitAction>(&action)) submit->model = found.model->name;
    return action;
  }
  if (path == "/healthz" || path == "/readyz" || path == "/metrics" || path == "/openapi.json") {
    if (!is_get(request)) return method_not_allowed("GET, HEAD");
    if (path == "/healthz") return json_ok(R"({"status":"ok"})");
    if (path == "/readyz") return readyz();
    if (path == "/openapi.json") return json_ok(std::string(openapi_json()));
    Response metrics;
    metrics.content_type = kPrometheusType;
    metrics.body = context_.metrics_text();
    return metrics;
  }
  std::string message = "no such resource: ";
  message.append(path.substr(0, 256));  // an attacker's megabyte-long path is not echoed whole
  return error_response(404, "not_found", message);
}

Response Api::readyz() {
  Readiness readiness = context_.readiness();
  if (readiness.ready) return json_ok(R"({"status":"ready"})");
  return error_response(503, readiness.code, readiness.message, 1);
}

Action Api::batchstring(const Request& request) {
  std::chrono::milliseconds timeout{};
  if (auto refused = read_timeout(request, limits_, timeout)) return std::move(*refused);
  std::optional<Priority> priority;
  if (auto refused = read_header_priority(request, priority)) return std::move(*refused);
  const auto content_type = request[beast_http::field::content_type];
  if (!is_text_plain(std::string_view(content_type.data(), content_type.size()))) {
    return parse_json_input(request, timeout, priority);
  }
  const std::string& body = request.body();
  if (!simdjson::validate_utf8(body.data(), body.size())) {
    return error_response(400, "invalid_utf8", "the request body is not valid UTF-8");
  }
  const std::uint32_t max_input = context_.max_input_bytes();
  if (max_input != 0 && body.size() > max_input) {
    return error_response(413, "too_large", "the input exceeds the daemon's limit of " +
                                                std::to_string(max_input) + " bytes");
  }
  return SubmitAction{body, timeout, BodyFormat::kText, priority.value_or(Priority::kNormal)};
}

Action Api::parse_json_input(const Request& request, std::chrono::milliseconds timeout,
                             std::optional<Priority> header_priority) {
  simdjson::dom::object root;
  if (auto refused = read_json_object(json_, request.body(), R"({"input": "..."})", root)) {
    return std::move(*refused);
  }
  simdjson::dom::element field;
  if (root.at_key("input").get(field) != simdjson::SUCCESS) {
    return error_response(400, "missing_field", R"(the JSON object has no "input" field)");
  }
  std::string_view input;
  if (field.get_string().get(input) != simdjson::SUCCESS) {
    return error_response(400, "bad_request", R"("input" must be a JSON string)");
  }
  std::optional<Priority> priority = header_priority;
  if (auto refused = read_json_priority(root, priority)) return std::move(*refused);
  const std::uint32_t max_input = context_.max_input_bytes();
  if (max_input != 0 && input.size() > max_input) {
    return error_response(413, "too_large", "the input exceeds the daemon's limit of " +
                                                std::to_string(max_input) + " bytes");
  }
  return SubmitAction{std::string(input), timeout, BodyFormat::kJson, priority.value_or(Priority::kNormal)};
}

std::optional<Response> read_timeout(const Request& request, const ApiLimits& limits,
                                     std::chrono::milliseconds& timeout) {
  timeout = limits.default_timeout;
  const auto it = request.find("X-Timeout-Ms");
  if (it == request.end()) return std::nullopt;
  const std::string_view value = text::trim(std::string_view(it->value().data(), it->value().size()));
  std::uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
  if (ec != std::errc() || end != value.data() + value.size() || ms == 0) {
    return error_response(400, "bad_timeout", "X-Timeout-Ms must be a positive whole number of milliseconds");
  }
  timeout = oip::capped_timeout(ms, limits.max_timeout);
  return std::nullopt;
}

std::optional<Response> read_header_priority(const Request& request, std::optional<Priority>& priority) {
  const auto it = request.find("X-Priority");
  if (it == request.end()) return std::nullopt;
  const std::string_view value = text::trim(std::string_view(it->value().data(), it->value().size()));
  if (!(priority = parse_priority(value))) return bad_priority("X-Priority", value);
  return std::nullopt;
}

std::optional<Response> read_json_priority(simdjson::dom::object root, std::optional<Priority>& priority) {
  simdjson::dom::element field;
  if (root.at_key("priority").get(field) != simdjson::SUCCESS) return std::nullopt;
  std::string_view name;
  if (field.get_string().get(name) != simdjson::SUCCESS) {
    return error_response(400, "bad_priority", R"("priority" must be a JSON string: high, normal or low)");
  }
  const std::optional<Priority> named = parse_priority(name);
  if (!named) return bad_priority(R"("priority")", name);
  if (priority && *priority != *named) {
    return error_response(400, "bad_priority", "X-Priority and the JSON priority field disagree");
  }
  priority = named;
  return std::nullopt;
}

std::optional<Response> read_json_object(simdjson::dom::parser& parser, const std::string& body,
                                         std::string_view expected, simdjson::dom::object& root) {
  simdjson::dom::element element;
  const simdjson::error_code parsed = parser.parse(body).get(element);
  if (parsed == simdjson::UTF8_ERROR) {
    return error_response(400, "invalid_utf8", "the request body is not valid UTF-8");
  }
  if (parsed != simdjson::SUCCESS) {
    return error_response(400, "invalid_json",
                          std::string("the body is not valid JSON: ") + simdjson::error_message(parsed));
  }
  if (element.get_object().get(root) != simdjson::SUCCESS) {
    return error_response(400, "bad_request", "the body must be a JSON object " + std::string(expected));
  }
  return std::nullopt;
}

Response response_for_error(const Error& error, oip::OverloadStatus overload) {
  struct Mapping {
    unsigned status;
    std::string_view code;
    unsigned retry_after_s;
  };
  auto map = [overload](ErrorCode code) -> Mapping {
    switch (code) {
      case ErrorCode::kTimeout: return {504, "timeout", 0};
      case ErrorCode::kOverloaded: return {oip::overload_http_status(overload), "overloaded", 1};
      case ErrorCode::kTooLarge: return {413, "too_large", 0};
      case ErrorCode::kInvalidUtf8: return {400, "invalid_utf8", 0};
      case ErrorCode::kDaemonUnavailable: return {503, "daemon_unavailable", 1};
      case ErrorCode::kBackendError: return {500, "backend_error", 0};
      case ErrorCode::kBackendUnavailable: return {503, "backend_unavailable", 1};
      case ErrorCode::kCancelled: return {503, "cancelled", 1};
      case ErrorCode::kProtocolError: return {500, "internal_error", 0};
      // The front-end's own attachment was refused: the daemon is there but not for it.
      case ErrorCode::kPermissionDenied: return {503, "daemon_unavailable", 0};
      case ErrorCode::kTooManyClients: return {503, "daemon_unavailable", 1};
      case ErrorCode::kUnknownModel: return {404, "unknown_model", 0};
    }
    return {500, "internal_error", 0};
  };
  const Mapping m = map(error.code);
  return error_response(m.status, m.code, error.message, m.retry_after_s);
}

Response response_for_result(Result&& result, BodyFormat format, oip::OverloadStatus overload) {
  if (!result.ok()) return response_for_error(result.error(), overload);
  std::string& output = result.output();
  Response response;
  if (format == BodyFormat::kText) {
    response.content_type = kTextType;
    response.body = std::move(output);
    return response;
  }
  // A JSON string cannot carry bytes that are not UTF-8; a backend may produce them.
  if (!simdjson::validate_utf8(output.data(), output.size())) {
    return error_response(500, "invalid_output",
                          "the backend's output is not valid UTF-8; send Content-Type: text/plain to get raw bytes");
  }
  response.body.reserve(output.size() + 14);
  response.body.append(R"({"output":")");
  text::append_json_escaped(output, response.body);
  response.body.append("\"}");
  return response;
}

}  // namespace batchd::http

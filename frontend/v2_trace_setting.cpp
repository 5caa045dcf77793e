// Triton's trace extension over HTTP: GET or POST /v2/trace/setting (the global settings) and
// /v2/models/NAME/trace/setting (a model's), each setting a JSON string (trace_level a list of
// them), null in a POST clearing one.
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontend/v2_api.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

std::string settings_json(const std::vector<tracing::TraceSetting>& settings) {
  std::string out = "{";
  for (const tracing::TraceSetting& setting : settings) {
    if (out.size() > 1) out += ',';
    out += '"';
    text::append_json_escaped_lossy(setting.name, out);
    out += "\":";
    const bool list = tracing::is_list_setting(setting.name);
    if (list) out += '[';
    for (std::size_t i = 0; i < setting.value->size(); ++i) {
      if (i != 0) out += ',';
      out += '"';
      text::append_json_escaped_lossy((*setting.value)[i], out);
      out += '"';
    }
    if (list) out += ']';
  }
  out += '}';
  return out;
}

// A setting's JSON value as strings: a string, a list of them, or an integer (as its digits);
// null clears it. Empty optional and `error` set for anything else.
std::optional<std::vector<std::string>> value_of(simdjson::dom::element value, std::string_view name,
                                                 std::string& error) {
  std::string_view text;
  if (value.get_string().get(text) == simdjson::SUCCESS) return std::vector<std::string>{std::string(text)};
  std::int64_t number = 0;
  if (value.get_int64().get(number) == simdjson::SUCCESS) return std::vector<std::string>{std::to_string(number)};
  simdjson::dom::array list;
  if (value.get_array().get(list) == simdjson::SUCCESS) {
    std::vector<std::string> out;
    for (const simdjson::dom::element item : list) {
      if (item.get_string().get(text) != simdjson::SUCCESS) break;
      out.emplace_back(text);
    }
    if (out.size() == list.size()) return out;
  }
  error = "the trace setting \"" + std::string(name.substr(0, 64)) + "\" must be a string, a list of strings or null";
  return std::nullopt;
}

}  // namespace

Response V2Api::trace_setting(const Request& request, std::string_view model) {
  const bool read = request.method() == beast_http::verb::get || request.method() == beast_http::verb::head;
  if (!read && request.method() != beast_http::verb::post) return v2_method_not_allowed("GET, HEAD, POST");
  Response response;
  if (trace_settings_ == nullptr) {  // tracing off: reads say OFF; changes are refused, saying how
    if (!read) {
      return v2_error(403, "tracing is off in this batchd-http: start it with --trace-endpoint, or with "
                           "OTEL_TRACES_EXPORTER=otlp (docs/TRACING.md)");
    }
    response.body = settings_json(tracing::trace_settings_off());
    return response;
  }
  if (read) {
    response.body = settings_json(trace_settings_->get(model));
    return response;
  }
  std::vector<tracing::TraceSetting> changes;
  std::optional<simdjson::dom::object> body;
  if (auto refused = read_optional_object(request, "a trace setting request", body)) return *refused;
  if (body) {
    for (const auto field : *body) {
      tracing::TraceSetting& change = changes.emplace_back();
      change.name = std::string(field.key);
      if (field.value.is_null()) continue;
      std::string error;
      change.value = value_of(field.value, field.key, error);
      if (!change.value) return v2_error(400, error);
    }
  }
  try {
    response.body = settings_json(trace_settings_->update(model, changes));
  } catch (const std::invalid_argument& refused) {
    return v2_error(400, refused.what());
  }
  return response;
}

}  // namespace batchd::http

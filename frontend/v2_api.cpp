#include "frontend/v2_api.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "oip/errors.hpp"
#include "oip/model.hpp"
#include "text/ascii.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

constexpr std::string_view kModelsPrefix = "/v2/models/";
// What GET /v2 lists: the protocol extensions these routes implement.
constexpr std::string_view kExtensions =
    R"("binary_tensor_data","model_configuration","model_repository","statistics","trace")";
constexpr std::string_view kTraceSetting = "/v2/trace/setting";
constexpr std::string_view kRepositoryIndex = "/v2/repository/index";
constexpr std::string_view kRepositoryModels = "/v2/repository/models/";

bool is_get_or_head(const Request& request) {
  return request.method() == beast_http::verb::get || request.method() == beast_http::verb::head;
}

Response v2_ok(std::string body) {
  Response response;
  response.body = std::move(body);
  return response;
}

Response not_found(std::string_view path) {
  return v2_error(404, "no such resource: " + std::string(path.substr(0, 256)));
}

}  // namespace

bool is_v2_target(std::string_view target) noexcept {
  const std::string_view path = path_of(target);
  return path == "/v2" || path.starts_with("/v2/");
}

V2Api::V2Api(const V2Limits& limits, ApiContext& context, tracing::TraceSettings* trace_settings)
    : limits_(limits),
      context_(context),
      trace_settings_(trace_settings),
      json_(std::max<std::size_t>(limits.api.max_body_bytes, 64)) {}

V2Action V2Api::route(const Request& request) {
  const std::string_view path = path_of(std::string_view(request.target().data(), request.target().size()));
  if (path.starts_with(kModelsPrefix)) return model_route(request, path.substr(kModelsPrefix.size()));
  if (path == kRepositoryIndex) {
    if (request.method() != beast_http::verb::post) return v2_method_not_allowed("POST");
    return repository_index(request);
  }
  if (path.starts_with(kRepositoryModels)) return repository_control(request, path.substr(kRepositoryModels.size()));
  if (path == kTraceSetting) return trace_setting(request, {});
  if (path != "/v2" && path != "/v2/health/live" && path != "/v2/health/ready") return not_found(path);
  if (!is_get_or_head(request)) return v2_method_not_allowed("GET, HEAD");
  if (path == "/v2") return v2_ok(oip::server_metadata_json(kExtensions));
  if (path == "/v2/health/live") return v2_ok("{}");
  return ready();
}

// Below /v2/models/: NAME[/versions/V][/ready|/config|/stats|/infer], NAME/trace/setting, and "stats"
// for all models.
V2Action V2Api::model_route(const Request& request, std::string_view rest) {
  const std::string_view full = path_of(std::string_view(request.target().data(), request.target().size()));
  if (rest == "stats") {
    if (!is_get_or_head(request)) return v2_method_not_allowed("GET, HEAD");
    return statistics(context_.models().models());
  }
  const std::size_t name_end = rest.find('/');
  const std::string_view name = rest.substr(0, name_end);
  rest = name_end == std::string_view::npos ? std::string_view() : rest.substr(name_end + 1);
  if (rest == "trace/setting") {
    oip::ModelCatalog::Lookup found = context_.models().find(name, {});
    if (!found.model) return v2_error(404, found.error);
    return trace_setting(request, found.model->name);
  }
  std::string_view version;
  if (rest.starts_with("versions/")) {
    rest.remove_prefix(std::string_view("versions/").size());
    const std::size_t version_end = rest.find('/');
    version = rest.substr(0, version_end);
    rest = version_end == std::string_view::npos ? std::string_view() : rest.substr(version_end + 1);
    if (version.empty()) return not_found(full);
  }
  if (!rest.empty() && rest != "ready" && rest != "config" && rest != "stats" && rest != "infer") {
    return not_found(full);
  }
  oip::ModelCatalog::Lookup found = context_.models().find(name, version);
  if (!found.model) return v2_error(404, found.error);
  if (rest == "infer") {
    if (request.method() != beast_http::verb::post) return v2_method_not_allowed("POST");
    return infer(request, std::move(found.model));
  }
  if (!is_get_or_head(request)) return v2_method_not_allowed("GET, HEAD");
  if (rest.empty()) return v2_ok(oip::model_metadata_json(*found.model));
  if (rest == "ready") return ready(found.model.get());
  if (rest == "config") return v2_ok(oip::model_config_json(*found.model, limits_.max_elements));
  return statistics({&found.model, 1});
}

Response V2Api::ready(const oip::ModelDescription* model) {
  Readiness readiness = context_.readiness();
  if (!readiness.ready) return v2_error(503, readiness.message, 1);
  if (model != nullptr && !model->unavailable.empty()) return v2_error(503, model->unavailable, 1);
  return v2_ok("{}");
}

std::optional<Response> V2Api::read_optional_object(const Request& request, std::string_view what,
                                                    std::optional<simdjson::dom::object>& root) {
  const std::string& body = request.body();
  if (text::trim(body).empty()) return std::nullopt;
  simdjson::dom::element element;
  simdjson::dom::object object;
  if (json_.parse(body.data(), body.size()).get(element) != simdjson::SUCCESS ||
      element.get_object().get(object) != simdjson::SUCCESS) {
    return v2_error(400, std::string(what) + " must be a JSON object");
  }
  root = object;
  return std::nullopt;
}

Response V2Api::repository_index(const Request& request) {
  // An empty body or {} lists every model; {"ready": true} only those ready now.
  bool only_ready = false;
  std::optional<simdjson::dom::object> body;
  if (auto refused = read_optional_object(request, "the repository index request", body)) return *refused;
  if (body) {
    const simdjson::dom::object root = *body;
    simdjson::dom::element ready;
    if (root.at_key("ready").get(ready) == simdjson::SUCCESS && ready.get_bool().get(only_ready) != simdjson::SUCCESS) {
      return v2_error(400, "\"ready\" in the repository index request must be true or false");
    }
  }
  const Readiness readiness = context_.readiness();
  std::string out = "[";
  for (const oip::ModelCatalog::Model& model : context_.models().models()) {
    const std::string& reason = readiness.ready ? model->unavailable : readiness.message;
    if (only_ready && !reason.empty()) continue;
    out += out.size() == 1 ? R"({"name":")" : R"(,{"name":")";
    text::append_json_escaped_lossy(model->name, out);
    out += R"(","version":")";
    text::append_json_escaped_lossy(model->version, out);
    out += reason.empty() ? R"(","state":"READY","reason":"")" : R"(","state":"UNAVAILABLE","reason":")";
    text::append_json_escaped_lossy(reason, out);
    out += reason.empty() ? "}" : "\"}";
  }
  out += "]";
  return v2_ok(std::move(out));
}

V2Action V2Api::repository_control(const Request& request, std::string_view rest) {
  const std::size_t slash = rest.find('/');
  const std::string_view name = rest.substr(0, slash);
  const std::string_view verb = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (name.empty() || (verb != "load" && verb != "unload")) {
    return not_found(path_of(std::string_view(request.target().data(), request.target().size())));
  }
  if (request.method() != beast_http::verb::post) return v2_method_not_allowed("POST");
  if (!limits_.model_control) {
    return v2_error(403, "model control is off: batchd-http serves load and unload with --model-control");
  }
  // Triton's body may carry "parameters": a configuration or files to load with, which batchd
  // does not take (it loads a model as its daemon's config declares it), and "unload_dependents",
  // which tritonclient sends and which means nothing here (no model depends on another).
  std::optional<simdjson::dom::object> body;
  if (auto refused = read_optional_object(request, "a load or unload request's body", body)) return *refused;
  if (body) {
    const simdjson::dom::object root = *body;
    simdjson::dom::element parameters;
    if (root.at_key("parameters").get(parameters) == simdjson::SUCCESS) {
      simdjson::dom::object named;
      if (parameters.get_object().get(named) != simdjson::SUCCESS) {
        return v2_error(400, "\"parameters\" in a load or unload request must be a JSON object");
      }
      for (const auto field : named) {
        if (field.key == "unload_dependents") continue;
        return v2_error(400, "batchd loads a model as its daemon's config declares it: parameter \"" +
                                 std::string(field.key) + "\" is not taken");
      }
    }
  }
  return V2ModelControl{std::string(name), verb == "load" ? ModelAction::kLoad : ModelAction::kUnload};
}

Response V2Api::statistics(std::span<const oip::ModelCatalog::Model> models) {
  // Triton's fields, all of them, since clients read them without checking. The counts are this
  // front-end's inferences of each model; every inference was queued, and perf_analyzer finds the
  // model's version by its queue count rising, so that count is the inferences'. The front-end
  // does not see how an inference's time splits into queue and compute: those times are the
  // daemon's mean per request of the model (its models table) times the count. perf_analyzer
  // wants the three compute counts equal: input and output take no time of their own here. Cache
  // hits and misses are every client's, as the daemon counts them (a hit never reaches it).
  const std::vector<oip::ModelTimes> all_times = context_.model_times();  // one read of the daemon's page
  std::string body = R"({"model_stats":[)";
  for (std::size_t i = 0; i < models.size(); ++i) {
    const oip::ModelDescription& model = *models[i];
    const InferStatistics s = context_.infer_statistics(model.id);
    const oip::ModelTimes times = oip::times_of(all_times, model.id);
    const std::uint64_t queued = s.success_count + s.fail_count;
    if (i != 0) body.push_back(',');
    body.append(R"({"name":")");
    text::append_json_escaped_lossy(model.name, body);
    body.append(R"(","version":")");
    text::append_json_escaped_lossy(model.version, body);
    fmt::format_to(
        std::back_inserter(body),
        R"(","last_inference":{},"inference_count":{},"execution_count":{},)"
        R"("inference_stats":{{"success":{{"count":{},"ns":{}}},"fail":{{"count":{},"ns":{}}},)"
        R"("queue":{{"count":{},"ns":{}}},"compute_input":{{"count":{},"ns":0}},)"
        R"("compute_infer":{{"count":{},"ns":{}}},"compute_output":{{"count":{},"ns":0}},)"
        R"("cache_hit":{{"count":{},"ns":{}}},"cache_miss":{{"count":{},"ns":{}}}}},"batch_stats":[]}})",
        s.last_inference_ms, s.inference_count, s.success_count, s.success_count, s.success_ns, s.fail_count,
        s.fail_ns, queued, oip::at_daemon_mean(queued, times.queue_ns, times), s.success_count, s.success_count,
        oip::at_daemon_mean(s.success_count, times.compute_ns, times), s.success_count, times.cache_hits,
        times.cache_hit_ns, times.cache_misses, times.cache_miss_ns);
  }
  body.append("]}");
  return v2_ok(std::move(body));
}


Response v2_method_not_allowed(std::string_view allow) {
  Response response = v2_error(405, "this resource allows only " + std::string(allow));
  response.allow = allow;
  return response;
}

Response v2_error(unsigned status, std::string_view message, unsigned retry_after_s) {
  Response response;
  response.status = status;
  response.retry_after_s = retry_after_s;
  response.body.append(R"({"error":")");
  // A message may quote what the peer sent, which need not be UTF-8; the body must be.
  text::append_json_escaped_lossy(message, response.body);
  response.body.append("\"}");
  return response;
}

Response v2_response_for_error(const Error& error, oip::OverloadStatus overload) {
  const oip::ErrorMapping mapping = oip::map_error(error.code, overload);
  return v2_error(mapping.http_status, error.message, mapping.retry_after_s);
}

}  // namespace batchd::http

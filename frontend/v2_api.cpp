#include "frontend/v2_api.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>

#include "oip/bytes_tensor.hpp"
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
    R"("binary_tensor_data","model_configuration","model_repository","statistics")";
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

Response v2_method_not_allowed(std::string_view allow) {
  Response response = v2_error(405, "this resource allows only " + std::string(allow));
  response.allow = allow;
  return response;
}

Response not_found(std::string_view path) {
  return v2_error(404, "no such resource: " + std::string(path.substr(0, 256)));
}

std::string_view header(const Request& request, std::string_view name) {
  const auto it = request.find(name);
  if (it == request.end()) return {};
  return text::trim(std::string_view(it->value().data(), it->value().size()));
}

bool parse_size(std::string_view text, std::uint64_t& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// The strings of a JSON "data" array: flat, or rows of strings for shape [N, 1]; no deeper.
Response too_many_strings(const oip::ModelDescription& model, std::size_t max_elements) {
  return v2_error(400, fmt::format("input '{}' holds more than {} strings (max_batch_size)", model.input, max_elements));
}

// At most max_elements + 1 strings are taken: a peer's rows may hold far more than its shape says.
std::optional<Response> read_json_data(const oip::ModelDescription& model, simdjson::dom::array data,
                                       std::size_t max_elements, std::vector<std::string_view>& out) {
  for (simdjson::dom::element item : data) {
    std::string_view value;
    if (item.get_string().get(value) == simdjson::SUCCESS) {
      out.push_back(value);
      if (out.size() > max_elements) return too_many_strings(model, max_elements);
      continue;
    }
    simdjson::dom::array row;
    if (item.get_array().get(row) != simdjson::SUCCESS) {
      return v2_error(400, fmt::format("input '{}' is BYTES: its \"data\" must hold JSON strings", model.input));
    }
    for (simdjson::dom::element inner : row) {
      if (inner.get_string().get(value) != simdjson::SUCCESS) {
        return v2_error(400, fmt::format("input '{}': \"data\" may nest one level (rows of strings) and must hold "
                                         "JSON strings",
                                         model.input));
      }
      out.push_back(value);
      if (out.size() > max_elements) return too_many_strings(model, max_elements);
    }
  }
  return std::nullopt;
}

void append_shape(const std::vector<std::int64_t>& shape, std::string& out) {
  out.push_back('[');
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out.push_back(',');
    out.append(std::to_string(shape[i]));
  }
  out.push_back(']');
}

// The response's JSON up to the output tensor's last field, which the caller appends.
void append_infer_head(const V2Reply& reply, std::string& out) {
  out.append("{");
  if (!reply.id.empty()) {
    out.append(R"("id":")");
    text::append_json_escaped(reply.id, out);
    out.append("\",");
  }
  out.append(R"("model_name":")");
  text::append_json_escaped_lossy(reply.model->name, out);
  out.append(R"(","model_version":")");
  text::append_json_escaped_lossy(reply.model->version, out);
  out.append(R"(","outputs":[{"name":")");
  text::append_json_escaped_lossy(reply.model->output, out);
  out.append(R"(","datatype":"BYTES","shape":)");
  append_shape(reply.shape, out);
}

}  // namespace

bool is_v2_target(std::string_view target) noexcept {
  const std::string_view path = path_of(target);
  return path == "/v2" || path.starts_with("/v2/");
}

V2Api::V2Api(const V2Limits& limits, ApiContext& context)
    : limits_(limits), context_(context), json_(std::max<std::size_t>(limits.api.max_body_bytes, 64)) {}

V2Action V2Api::route(const Request& request) {
  const std::string_view path = path_of(std::string_view(request.target().data(), request.target().size()));
  if (path.starts_with(kModelsPrefix)) return model_route(request, path.substr(kModelsPrefix.size()));
  if (path == kRepositoryIndex) {
    if (request.method() != beast_http::verb::post) return v2_method_not_allowed("POST");
    return repository_index(request);
  }
  if (path.starts_with(kRepositoryModels)) return repository_control(request, path.substr(kRepositoryModels.size()));
  if (path != "/v2" && path != "/v2/health/live" && path != "/v2/health/ready") return not_found(path);
  if (!is_get_or_head(request)) return v2_method_not_allowed("GET, HEAD");
  if (path == "/v2") return v2_ok(oip::server_metadata_json(kExtensions));
  if (path == "/v2/health/live") return v2_ok("{}");
  return ready();
}

// Below /v2/models/: NAME[/versions/V][/ready|/config|/stats|/infer], and "stats" for all models.
V2Action V2Api::model_route(const Request& request, std::string_view rest) {
  const std::string_view full = path_of(std::string_view(request.target().data(), request.target().size()));
  if (rest == "stats") {
    if (!is_get_or_head(request)) return v2_method_not_allowed("GET, HEAD");
    return statistics(context_.models().models());
  }
  const std::size_t name_end = rest.find('/');
  const std::string_view name = rest.substr(0, name_end);
  rest = name_end == std::string_view::npos ? std::string_view() : rest.substr(name_end + 1);
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
  // wants the three compute counts equal: input and output take no time of their own here.
  constexpr std::string_view kZero = R"({"count":0,"ns":0})";
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
        R"("compute_infer":{{"count":{},"ns":{}}},"compute_output":{{"count":{},"ns":0}},"cache_hit":{},)"
        R"("cache_miss":{}}},"batch_stats":[]}})",
        s.last_inference_ms, s.inference_count, s.success_count, s.success_count, s.success_ns, s.fail_count,
        s.fail_ns, queued, oip::at_daemon_mean(queued, times.queue_ns, times), s.success_count, s.success_count,
        oip::at_daemon_mean(s.success_count, times.compute_ns, times), s.success_count, kZero, kZero);
  }
  body.append("]}");
  return v2_ok(std::move(body));
}

V2Action V2Api::infer(const Request& request, oip::ModelCatalog::Model model) {
  V2Infer infer;
  infer.reply.model = std::move(model);
  const oip::ModelDescription& described = *infer.reply.model;
  if (auto refused = read_timeout(request, limits_.api, infer.timeout)) {
    return v2_error(400, "X-Timeout-Ms must be a positive whole number of milliseconds");
  }
  std::optional<Priority> priority;
  if (auto refused = read_header_priority(request, priority)) {
    return v2_error(400, "X-Priority must be high, normal or low");
  }
  infer.priority = priority.value_or(Priority::kNormal);
  const std::string_view encoding = header(request, "Content-Encoding");
  if (!encoding.empty() && !text::iequals(encoding, "identity")) {
    return v2_error(400, "Content-Encoding " + std::string(encoding.substr(0, 64)) +
                             " is not supported: send the body uncompressed");
  }
  const std::string& body = request.body();
  std::string_view json = body;
  std::string_view binary;
  const std::string_view header_length = header(request, "Inference-Header-Content-Length");
  if (!header_length.empty()) {
    std::uint64_t length = 0;
    if (!parse_size(header_length, length) || length > body.size()) {
      return v2_error(400, "Inference-Header-Content-Length must be a whole number no larger than the body (" +
                               std::to_string(body.size()) + " bytes)");
    }
    json = json.substr(0, length);
    binary = std::string_view(body).substr(length);
  }
  simdjson::dom::element element;
  const simdjson::error_code parsed = json_.parse(json.data(), json.size()).get(element);
  if (parsed != simdjson::SUCCESS) {
    return v2_error(400, std::string("the inference request is not valid JSON: ") + simdjson::error_message(parsed));
  }
  simdjson::dom::object root;
  if (element.get_object().get(root) != simdjson::SUCCESS) {
    return v2_error(400, "the inference request must be a JSON object");
  }
  simdjson::dom::element field;
  if (root.at_key("id").get(field) == simdjson::SUCCESS) {
    std::string_view id;
    if (field.get_string().get(id) != simdjson::SUCCESS) return v2_error(400, "\"id\" must be a JSON string");
    infer.reply.id = oip::echoed_id(id);
  }
  if (auto refused = read_parameters(root, infer)) return std::move(*refused);
  simdjson::dom::array inputs;
  if (root.at_key("inputs").get(field) != simdjson::SUCCESS || field.get_array().get(inputs) != simdjson::SUCCESS) {
    return v2_error(400, "the inference request needs \"inputs\", a JSON array");
  }
  if (auto wrong = oip::check_input_count(described, inputs.size())) return v2_error(400, *wrong);
  simdjson::dom::object input;
  if (inputs.at(0).get_object().get(input) != simdjson::SUCCESS) {
    return v2_error(400, "each of \"inputs\" must be a JSON object");
  }
  std::size_t binary_used = 0;
  if (auto refused = read_input(described, input, binary, binary_used, infer)) return std::move(*refused);
  if (binary_used != binary.size()) {
    return v2_error(400, fmt::format("the body has {} bytes of binary data after its JSON header, and the inputs' "
                                     "binary_data_size claim {}",
                                     binary.size(), binary_used));
  }
  if (auto refused = read_outputs(described, root, infer)) return std::move(*refused);
  if (auto wrong = oip::check_strings(described, infer.inputs, context_.max_input_bytes())) {
    return v2_error(400, *wrong);
  }
  return infer;
}

std::optional<Response> V2Api::read_parameters(simdjson::dom::object root, V2Infer& infer) {
  simdjson::dom::element field;
  if (root.at_key("parameters").get(field) != simdjson::SUCCESS) return std::nullopt;
  simdjson::dom::object parameters;
  if (field.get_object().get(parameters) != simdjson::SUCCESS) {
    return v2_error(400, "\"parameters\" must be a JSON object");
  }
  if (parameters.at_key("binary_data_output").get(field) == simdjson::SUCCESS &&
      field.get_bool().get(infer.reply.binary) != simdjson::SUCCESS) {
    return v2_error(400, "the parameter binary_data_output must be true or false");
  }
  // Triton's request timeout, in microseconds; it replaces X-Timeout-Ms and is capped the same way.
  if (parameters.at_key("timeout").get(field) == simdjson::SUCCESS) {
    std::uint64_t us = 0;
    if (field.get_uint64().get(us) != simdjson::SUCCESS || us == 0) {
      return v2_error(400, "the parameter timeout must be a positive whole number of microseconds");
    }
    infer.timeout = oip::timeout_parameter(us, limits_.api.max_timeout);
  }
  return std::nullopt;
}

std::optional<Response> V2Api::read_input(const oip::ModelDescription& model, simdjson::dom::object input,
                                          std::string_view binary, std::size_t& binary_used, V2Infer& infer) {
  const std::string& in = model.input;
  std::string_view name;
  if (input.at_key("name").get_string().get(name) != simdjson::SUCCESS) {
    return v2_error(400, "the input has no \"name\" string");
  }
  std::string_view datatype;
  if (input.at_key("datatype").get_string().get(datatype) != simdjson::SUCCESS) {
    return v2_error(400, fmt::format("input '{}' has no \"datatype\" string", in));
  }
  if (auto wrong = oip::check_input_tensor(model, name, datatype)) return v2_error(400, *wrong);
  simdjson::dom::array shape;
  if (input.at_key("shape").get_array().get(shape) != simdjson::SUCCESS) {
    return v2_error(400, fmt::format("input '{}' needs \"shape\", a JSON array of whole numbers", in));
  }
  for (simdjson::dom::element dim : shape) {
    std::int64_t value = 0;
    if (dim.get_int64().get(value) != simdjson::SUCCESS) {
      return v2_error(400, fmt::format("input '{}': each dimension of \"shape\" must be a whole number", in));
    }
    infer.reply.shape.push_back(value);
  }
  const oip::ShapeCheck check = oip::check_input_shape(model, infer.reply.shape, limits_.max_elements);
  if (check.error) return v2_error(400, *check.error);
  simdjson::dom::element field;
  const bool has_data = input.at_key("data").get(field) == simdjson::SUCCESS;
  std::uint64_t binary_size = 0;
  simdjson::dom::element size_field;
  simdjson::dom::element parameters;
  const bool has_parameters = input.at_key("parameters").get(parameters) == simdjson::SUCCESS;
  if (has_parameters && !parameters.is_object()) {
    return v2_error(400, fmt::format("input '{}': \"parameters\" must be a JSON object", in));
  }
  if (has_parameters && parameters.at_key("binary_data_size").get(size_field) == simdjson::SUCCESS) {
    if (size_field.get_uint64().get(binary_size) != simdjson::SUCCESS) {
      return v2_error(400, fmt::format("input '{}': binary_data_size must be a whole number of bytes", in));
    }
    if (has_data) return v2_error(400, fmt::format("input '{}' has both \"data\" and binary_data_size", in));
    if (binary_size > binary.size() - binary_used) {
      return v2_error(400, fmt::format("input '{}' claims {} bytes of binary data but the body holds {}", in,
                                       binary_size, binary.size() - binary_used));
    }
    const std::string_view data = binary.substr(binary_used, binary_size);
    binary_used += binary_size;
    if (auto fault = oip::decode_bytes_elements(data, check.elements, infer.inputs)) {
      return v2_error(400, fmt::format("input '{}': {}", in, *fault));
    }
    return std::nullopt;
  }
  simdjson::dom::array data;
  if (!has_data || field.get_array().get(data) != simdjson::SUCCESS) {
    return v2_error(400, fmt::format("input '{}' needs \"data\" (a JSON array) or a binary_data_size parameter", in));
  }
  // A peer's array may be far longer than its shape says: no more than the limit is read.
  if (data.size() > limits_.max_elements) return too_many_strings(model, limits_.max_elements);
  infer.inputs.reserve(check.elements);
  if (auto refused = read_json_data(model, data, limits_.max_elements, infer.inputs)) return refused;
  if (infer.inputs.size() != check.elements) {
    return v2_error(400, fmt::format("input '{}' has {} strings in \"data\" but its shape holds {}", in,
                                     infer.inputs.size(), check.elements));
  }
  return std::nullopt;
}

std::optional<Response> V2Api::read_outputs(const oip::ModelDescription& model, simdjson::dom::object root,
                                            V2Infer& infer) {
  simdjson::dom::element field;
  if (root.at_key("outputs").get(field) != simdjson::SUCCESS) return std::nullopt;
  simdjson::dom::array outputs;
  if (field.get_array().get(outputs) != simdjson::SUCCESS) return v2_error(400, "\"outputs\" must be a JSON array");
  for (simdjson::dom::element item : outputs) {
    std::string_view name;
    if (item.at_key("name").get_string().get(name) != simdjson::SUCCESS) {
      return v2_error(400, "each of \"outputs\" needs a \"name\" string");
    }
    if (auto wrong = oip::check_output_name(model, name)) return v2_error(400, *wrong);
    simdjson::dom::element parameters;
    if (item.at_key("parameters").get(parameters) != simdjson::SUCCESS) continue;
    if (!parameters.is_object()) {
      return v2_error(400, fmt::format("output '{}': \"parameters\" must be a JSON object", model.output));
    }
    if (parameters.at_key("classification").get(field) == simdjson::SUCCESS) {
      return v2_error(400, fmt::format("output '{}' is BYTES: the classification extension does not apply",
                                       model.output));
    }
    if (parameters.at_key("binary_data").get(field) == simdjson::SUCCESS &&
        field.get_bool().get(infer.reply.binary) != simdjson::SUCCESS) {
      return v2_error(400, "the output parameter binary_data must be true or false");
    }
  }
  return std::nullopt;
}

Response v2_error(unsigned status, std::string_view message, unsigned retry_after_s) {
  Response response;
  response.status = status;
  response.retry_after_s = retry_after_s;
  response.body.append(R"({"error":")");
  // A message may quote what the peer sent, which need not be UTF-8; the body must be.
  if (simdjson::validate_utf8(message.data(), message.size())) {
    text::append_json_escaped(message, response.body);
  } else {
    std::string ascii(message);
    for (char& c : ascii) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
    text::append_json_escaped(ascii, response.body);
  }
  response.body.append("\"}");
  return response;
}

Response v2_response_for_error(const Error& error) {
  const oip::ErrorMapping mapping = oip::map_error(error.code);
  return v2_error(mapping.http_status, error.message, mapping.retry_after_s);
}

Response v2_infer_response(const V2Reply& reply, std::span<Result> results) {
  std::size_t output_bytes = 0;
  for (const Result& result : results) output_bytes += result.output().size();
  Response response;
  std::string& out = response.body;
  if (reply.binary) {
    const std::size_t framed = oip::framed_size(results.size(), output_bytes);
    out.reserve(160 + reply.id.size() + framed);
    append_infer_head(reply, out);
    out.append(R"(,"parameters":{"binary_data_size":)");
    out.append(std::to_string(framed));
    out.append("}}]}");
    response.inference_header_length = out.size();
    response.content_type = kOctetStreamType;
    for (const Result& result : results) oip::append_bytes_element(out, result.output());
    return response;
  }
  out.reserve(160 + reply.id.size() + output_bytes + 4 * results.size());
  append_infer_head(reply, out);
  out.append(R"(,"data":[)");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string& output = results[i].output();
    // A JSON string cannot carry bytes that are not UTF-8; a backend may produce them.
    if (!simdjson::validate_utf8(output.data(), output.size())) {
      return v2_error(500, fmt::format("output {} is not valid UTF-8, which a JSON tensor cannot carry; ask for "
                                       "binary_data on output '{}' to get raw bytes",
                                       i, reply.model->output));
    }
    if (i != 0) out.push_back(',');
    out.push_back('"');
    text::append_json_escaped(output, out);
    out.push_back('"');
  }
  out.append("]}]}");
  return response;
}

}  // namespace batchd::http

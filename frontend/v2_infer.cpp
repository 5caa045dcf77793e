// The Open Inference Protocol's inference over HTTP (v2_api.hpp): a request's JSON tensors or
// binary tensor data checked and read into the strings that go to the daemon, and the answer
// written as the protocol wants it.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>

#include "frontend/v2_api.hpp"
#include "oip/bytes_tensor.hpp"
#include "oip/model.hpp"
#include "text/ascii.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

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

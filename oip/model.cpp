#include "oip/model.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>

#include "text/json_escape.hpp"

namespace batchd::oip {

namespace {

// Echoed names are cut short: a peer's megabyte-long name is not copied into the answer whole.
std::string_view echoed(std::string_view peer_text, std::size_t most = 128) { return peer_text.substr(0, most); }

// A model's name as a JSON string's inside: the names come from the operator's configuration.
std::string json(std::string_view text) {
  std::string out;
  text::append_json_escaped_lossy(text, out);
  return out;
}

}  // namespace

const ModelDescription& default_model() {
  static const ModelDescription model{"batchstring", "1", "INPUT", "OUTPUT"};
  return model;
}

const ModelCatalog& default_catalog() {
  static const ModelCatalog catalog({default_model()});
  return catalog;
}

ModelDescription served_model(std::string name, std::string version) {
  return ModelDescription{std::move(name), std::move(version), default_model().input, default_model().output};
}

ModelCatalog::ModelCatalog(std::vector<ModelDescription> models) {
  models_.reserve(models.size());
  for (ModelDescription& model : models) models_.push_back(std::make_shared<const ModelDescription>(std::move(model)));
}

ModelCatalog::Lookup ModelCatalog::find(std::string_view name, std::string_view version) const {
  Lookup lookup;
  const auto it = std::find_if(models_.begin(), models_.end(), [&](const Model& m) { return m->name == name; });
  if (it == models_.end()) {
    std::string served;
    for (const Model& m : models_) served += (served.empty() ? "'" : ", '") + m->name + "'";
    lookup.error = fmt::format("unknown model '{}': this server serves {}", echoed(name),
                               served.empty() ? std::string("no model") : served);
    return lookup;
  }
  const ModelDescription& model = **it;
  if (!version.empty() && version != model.version) {
    lookup.error = fmt::format("unknown version '{}' of model '{}': it has version {}", echoed(version, 64),
                               model.name, model.version);
    return lookup;
  }
  lookup.model = *it;
  return lookup;
}

std::string_view server_version() noexcept { return BATCHD_VERSION; }

std::string echoed_id(std::string_view id) {
  constexpr std::size_t kMaxBytes = 256;
  if (id.size() <= kMaxBytes) return std::string(id);
  std::size_t cut = kMaxBytes;
  while (cut > 0 && (static_cast<unsigned char>(id[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(id.substr(0, cut));
}

std::chrono::milliseconds capped_timeout(std::uint64_t ms, std::chrono::milliseconds max) {
  return std::min(max, std::chrono::milliseconds(std::min<std::uint64_t>(ms, 1ULL << 40)));
}

std::chrono::milliseconds timeout_parameter(std::uint64_t us, std::chrono::milliseconds max) {
  // Rounded up without adding first, which would wrap a claim near 2^64 to 0 ms.
  return capped_timeout(us / 1000 + (us % 1000 != 0 ? 1 : 0), max);
}

ShapeCheck check_input_shape(const ModelDescription& model, std::span<const std::int64_t> shape,
                             std::size_t max_elements) {
  ShapeCheck check;
  const std::string& input = model.input;
  if (shape.empty() || shape.size() > 2) {
    check.error = fmt::format("input '{}' must have shape [N, 1] or [N], not rank {}", input, shape.size());
    return check;
  }
  if (shape.size() == 2 && shape[1] != 1) {
    check.error = fmt::format("input '{}' has shape [{}, {}]: each row holds one string, so the second dimension "
                              "must be 1",
                              input, shape[0], shape[1]);
    return check;
  }
  if (shape[0] < 0) {
    check.error = fmt::format("input '{}' has a negative dimension ({})", input, shape[0]);
    return check;
  }
  if (static_cast<std::uint64_t>(shape[0]) > max_elements) {
    check.error = fmt::format("input '{}' holds {} strings; one request may carry at most {} (max_batch_size)", input,
                              shape[0], max_elements);
    return check;
  }
  check.elements = static_cast<std::size_t>(shape[0]);
  return check;
}

std::optional<std::string> check_input_count(const ModelDescription& model, std::size_t inputs) {
  if (inputs == 1) return std::nullopt;
  return fmt::format("model '{}' takes 1 input, '{}'; the request has {}", model.name, model.input, inputs);
}

std::optional<std::string> check_input_tensor(const ModelDescription& model, std::string_view name,
                                              std::string_view datatype) {
  if (name != model.input) {
    return fmt::format("unexpected inference input '{}' for model '{}': it takes '{}'", echoed(name), model.name,
                       model.input);
  }
  if (datatype != kBytesType) {
    return fmt::format("input '{}' must have datatype BYTES, not '{}'", model.input, echoed(datatype, 32));
  }
  return std::nullopt;
}

std::optional<std::string> check_output_name(const ModelDescription& model, std::string_view name) {
  if (name == model.output) return std::nullopt;
  return fmt::format("unexpected inference output '{}' for model '{}': it has '{}'", echoed(name), model.name,
                     model.output);
}

std::optional<std::string> check_strings(const ModelDescription& model, std::span<const std::string_view> strings,
                                         std::uint32_t max_input_bytes) {
  for (std::size_t i = 0; i < strings.size(); ++i) {
    const std::string_view s = strings[i];
    if (max_input_bytes != 0 && s.size() > max_input_bytes) {
      return fmt::format("string {} of input '{}' is {} bytes, over the daemon's limit of {}", i, model.input,
                         s.size(), max_input_bytes);
    }
    if (!simdjson::validate_utf8(s.data(), s.size())) {
      return fmt::format("string {} of input '{}' is not valid UTF-8", i, model.input);
    }
  }
  return std::nullopt;
}

std::string server_metadata_json(std::string_view extensions) {
  return fmt::format(R"({{"name":"{}","version":"{}","extensions":[{}]}})", kServerName, server_version(),
                     extensions);
}

std::string model_metadata_json(const ModelDescription& model) {
  return fmt::format(
      R"({{"name":"{0}","versions":["{1}"],"platform":"batchd","inputs":[{{"name":"{2}","datatype":"BYTES","shape":[-1,1]}}],)"
      R"("outputs":[{{"name":"{3}","datatype":"BYTES","shape":[-1,1]}}]}})",
      json(model.name), json(model.version), json(model.input), json(model.output));
}

std::string model_config_json(const ModelDescription& model, std::size_t max_batch_size) {
  return fmt::format(
      R"({{"name":"{0}","platform":"batchd","backend":"batchd","version_policy":{{"latest":{{"num_versions":1}}}},)"
      R"("max_batch_size":{1},)"
      R"("input":[{{"name":"{2}","data_type":"TYPE_STRING","format":"FORMAT_NONE","dims":[1],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false}}],)"
      R"("output":[{{"name":"{3}","data_type":"TYPE_STRING","dims":[1],"label_filename":"","is_shape_tensor":false}}],)"
      R"("dynamic_batching":{{}},)"
      R"("instance_group":[{{"name":"{0}","kind":"KIND_GPU","count":1}}],)"
      R"("model_transaction_policy":{{"decoupled":false}},"response_cache":{{"enable":{4}}}}})",
      json(model.name), max_batch_size, json(model.input), json(model.output), model.response_cache);
}

}  // namespace batchd::oip

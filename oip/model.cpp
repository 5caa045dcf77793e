#include "oip/model.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>

namespace batchd::oip {

std::string_view server_version() noexcept { return BATCHD_VERSION; }

std::optional<std::string> check_model(std::string_view name, std::string_view version) {
  // Echoed names are cut short: a peer's megabyte-long name is not copied into the answer whole.
  if (name != kModelName) {
    return fmt::format("unknown model '{}': this server serves '{}'", name.substr(0, 128), kModelName);
  }
  if (!version.empty() && version != kModelVersion) {
    return fmt::format("unknown version '{}' of model '{}': it has version {}", version.substr(0, 64), kModelName,
                       kModelVersion);
  }
  return std::nullopt;
}

std::string echoed_id(std::string_view id) {
  constexpr std::size_t kMaxBytes = 256;
  if (id.size() <= kMaxBytes) return std::string(id);
  std::size_t cut = kMaxBytes;
  while (cut > 0 && (static_cast<unsigned char>(id[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
  return std::string(id.substr(0, cut));
}

std::chrono::milliseconds timeout_parameter(std::uint64_t us, std::chrono::milliseconds max) {
  // Rounded up without adding first, which would wrap a claim near 2^64 to 0 ms.
  const std::uint64_t ms = us / 1000 + (us % 1000 != 0 ? 1 : 0);
  return std::min(max, std::chrono::milliseconds(std::min<std::uint64_t>(ms, 1ULL << 40)));
}

ShapeCheck check_input_shape(std::span<const std::int64_t> shape, std::size_t max_elements) {
  ShapeCheck check;
  if (shape.empty() || shape.size() > 2) {
    check.error = fmt::format("input '{}' must have shape [N, 1] or [N], not rank {}", kInputName, shape.size());
    return check;
  }
  if (shape.size() == 2 && shape[1] != 1) {
    check.error = fmt::format("input '{}' has shape [{}, {}]: each row holds one string, so the second dimension "
                              "must be 1",
                              kInputName, shape[0], shape[1]);
    return check;
  }
  if (shape[0] < 0) {
    check.error = fmt::format("input '{}' has a negative dimension ({})", kInputName, shape[0]);
    return check;
  }
  if (static_cast<std::uint64_t>(shape[0]) > max_elements) {
    check.error = fmt::format("input '{}' holds {} strings; one request may carry at most {} (max_batch_size)",
                              kInputName, shape[0], max_elements);
    return check;
  }
  check.elements = static_cast<std::size_t>(shape[0]);
  return check;
}

std::optional<std::string> check_input_tensor(std::string_view name, std::string_view datatype) {
  if (name != kInputName) {
    return fmt::format("unexpected inference input '{}' for model '{}': it takes '{}'", name.substr(0, 128),
                       kModelName, kInputName);
  }
  if (datatype != kBytesType) {
    return fmt::format("input '{}' must have datatype BYTES, not '{}'", kInputName, datatype.substr(0, 32));
  }
  return std::nullopt;
}

std::optional<std::string> check_output_name(std::string_view name) {
  if (name == kOutputName) return std::nullopt;
  return fmt::format("unexpected inference output '{}' for model '{}': it has '{}'", name.substr(0, 128), kModelName,
                     kOutputName);
}

std::optional<std::string> check_strings(std::span<const std::string_view> strings, std::uint32_t max_input_bytes) {
  for (std::size_t i = 0; i < strings.size(); ++i) {
    const std::string_view s = strings[i];
    if (max_input_bytes != 0 && s.size() > max_input_bytes) {
      return fmt::format("string {} of input '{}' is {} bytes, over the daemon's limit of {}", i, kInputName, s.size(),
                         max_input_bytes);
    }
    if (!simdjson::validate_utf8(s.data(), s.size())) {
      return fmt::format("string {} of input '{}' is not valid UTF-8", i, kInputName);
    }
  }
  return std::nullopt;
}

std::string server_metadata_json(std::string_view extensions) {
  return fmt::format(R"({{"name":"{}","version":"{}","extensions":[{}]}})", kServerName, server_version(),
                     extensions);
}

std::string model_metadata_json() {
  return fmt::format(
      R"({{"name":"{0}","versions":["{1}"],"platform":"batchd","inputs":[{{"name":"{2}","datatype":"BYTES","shape":[-1,1]}}],)"
      R"("outputs":[{{"name":"{3}","datatype":"BYTES","shape":[-1,1]}}]}})",
      kModelName, kModelVersion, kInputName, kOutputName);
}

std::string model_config_json(std::size_t max_batch_size) {
  return fmt::format(
      R"({{"name":"{0}","platform":"batchd","backend":"batchd","version_policy":{{"latest":{{"num_versions":1}}}},)"
      R"("max_batch_size":{1},)"
      R"("input":[{{"name":"{2}","data_type":"TYPE_STRING","format":"FORMAT_NONE","dims":[1],"is_shape_tensor":false,"allow_ragged_batch":false,"optional":false}}],)"
      R"("output":[{{"name":"{3}","data_type":"TYPE_STRING","dims":[1],"label_filename":"","is_shape_tensor":false}}],)"
      R"("dynamic_batching":{{}},)"
      R"("instance_group":[{{"name":"{0}","kind":"KIND_GPU","count":1}}],)"
      R"("model_transaction_policy":{{"decoupled":false}}}})",
      kModelName, max_batch_size, kInputName, kOutputName);
}

}  // namespace batchd::oip

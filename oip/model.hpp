// The models batchd serves, as the Open Inference Protocol describes them: each one's name,
// version and tensors (ModelDescription, the one place a model's names live on the front-ends'
// side), the checks a request's tensors must pass against its model (both front-ends call these),
// and the JSON of the HTTP metadata routes. batchd-grpc builds the same metadata and configuration
// as protobuf messages from the same description (grpc_frontend/service.cpp).
//
// The tensors are BYTES of shape [-1, 1]: a batch dimension (max_batch_size > 0 in the
// configuration, as Triton's clients and perf_analyzer expect for a batching model) over one
// string each. A request may also send shape [N]; either way its N strings become N requests to
// the daemon, batched with everyone else's, and the output has the shape the input had.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace batchd::oip {

inline constexpr std::string_view kServerName = "batchd";
inline constexpr std::string_view kBytesType = "BYTES";

// A model's names: one string in (its input tensor), one string out (its output tensor).
struct ModelDescription {
  std::string name;
  std::string version;
  std::string input;
  std::string output;
  std::uint32_t id = 0;  // its id in the daemon's models table (the default model: 0)
  // Why the model cannot run requests now (a workers model with no worker attached); empty while
  // it can. Its requests are still taken and wait within their deadlines.
  std::string unavailable{};
  bool response_cache = false;  // its answers are cached (docs/CACHE.md): Triton's response_cache.enable
};

// The default model, the fixed function batchstring: version 1, INPUT to OUTPUT.
[[nodiscard]] const ModelDescription& default_model();
// A model the daemon serves, by the name and version it publishes: one string in, one out, with
// the default model's tensor names.
[[nodiscard]] ModelDescription served_model(std::string name, std::string version);

// The models a front-end serves, found by the name (and version) a request gives. A request in
// flight keeps its model's description (shared), whatever becomes of the catalog meanwhile.
class ModelCatalog {
 public:
  using Model = std::shared_ptr<const ModelDescription>;
  explicit ModelCatalog(std::vector<ModelDescription> models);

  // The model a request naming `name` and `version` (empty: the latest) means, or the reason
  // there is none, for the protocol's NOT_FOUND / 404.
  struct Lookup {
    Model model;
    std::string error;
  };
  [[nodiscard]] Lookup find(std::string_view name, std::string_view version) const;
  [[nodiscard]] std::span<const Model> models() const noexcept { return models_; }

 private:
  std::vector<Model> models_;
};

// The catalog of the default model alone.
[[nodiscard]] const ModelCatalog& default_catalog();

// The project's version (meson's), as server metadata reports it.
std::string_view server_version() noexcept;

// A request's id as its answer echoes it: at most 256 bytes (a peer's megabyte-long id is not
// copied into every answer), cut at a character boundary so the echo stays UTF-8.
std::string echoed_id(std::string_view id);

// A deadline a caller asked for, in milliseconds (X-Timeout-Ms), capped at `max`; and at 2^40 ms
// whatever `max` is, so that nanosecond arithmetic on it cannot wrap.
std::chrono::milliseconds capped_timeout(std::uint64_t ms, std::chrono::milliseconds max);
// Triton's request parameter "timeout", in microseconds, as a deadline: rounded up to whole
// milliseconds and capped as above.
std::chrono::milliseconds timeout_parameter(std::uint64_t us, std::chrono::milliseconds max);

// The elements a tensor of `shape` holds, when the shape is one the model takes ([N] or [N, 1],
// N >= 0) and N <= max_elements; otherwise the reason, for INVALID_ARGUMENT / 400.
struct ShapeCheck {
  std::size_t elements = 0;
  std::optional<std::string> error;
};
ShapeCheck check_input_shape(const ModelDescription& model, std::span<const std::int64_t> shape,
                             std::size_t max_elements);

// How many input tensors a request has: the reason that is not the model's one, or nothing.
std::optional<std::string> check_input_count(const ModelDescription& model, std::size_t inputs);
// An input tensor's name and datatype as the request gives them: the reason they are not the
// model's (for INVALID_ARGUMENT / 400), or nothing.
std::optional<std::string> check_input_tensor(const ModelDescription& model, std::string_view name,
                                              std::string_view datatype);
// A requested output's name: the reason it is not the model's output, or nothing.
std::optional<std::string> check_output_name(const ModelDescription& model, std::string_view name);
// The strings one request carries: the first that is over `max_input_bytes` (0: not checked; the
// daemon checks again) or not UTF-8, named, or nothing. What the daemon would refuse anyway,
// refused for the whole request before any string is sent.
std::optional<std::string> check_strings(const ModelDescription& model, std::span<const std::string_view> strings,
                                         std::uint32_t max_input_bytes);

// The JSON bodies of the HTTP metadata endpoints; `extensions` is a JSON array's inside.
std::string server_metadata_json(std::string_view extensions);
std::string model_metadata_json(const ModelDescription& model);
// Triton's model configuration (what perf_analyzer and tritonclient read): `max_batch_size` is
// the most strings one request may carry.
std::string model_config_json(const ModelDescription& model, std::size_t max_batch_size);

}  // namespace batchd::oip

// The Open Inference Protocol's HTTP routes (KServe v2, as Triton serves them): health, server and
// model metadata, the model configuration and statistics Triton's clients read, and inference with
// JSON tensors or the binary tensor data extension. Like http_api, free of I/O: the event loop
// submits what route() returns and hands the answers back to v2_infer_response().
//
// Errors use the protocol's body, {"error": "..."}, not /v1's {"error": {"code", "message"}}.
#pragma once

#include <simdjson.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "client_lib/client.hpp"
#include "frontend/http_api.hpp"
#include "oip/errors.hpp"
#include "oip/model.hpp"
#include "tracing/trace_settings.hpp"

namespace batchd::http {

// "/v2" and everything below it.
bool is_v2_target(std::string_view target) noexcept;

// What an inference's answer needs from its request.
struct V2Reply {
  std::string id;                   // the request's "id", echoed; empty: none was sent
  std::vector<std::int64_t> shape;  // the input's, which the output keeps
  bool binary = false;              // the output as binary tensor data
  oip::ModelCatalog::Model model = oip::default_catalog().models().front();  // the model the request named
};

// An inference that passed every check: its strings go to the daemon, one request each.
struct V2Infer {
  // Views into the request's body or the V2Api's parser: valid until the request is destroyed
  // or route() is called again, whichever is first.
  std::vector<std::string_view> inputs;
  V2Reply reply;
  std::chrono::milliseconds timeout{};
  Priority priority = Priority::kNormal;
};

// POST /v2/repository/models/NAME/load or /unload, with model control on.
struct V2ModelControl {
  std::string model;
  ModelAction action = ModelAction::kLoad;
};

using V2Action = std::variant<Response, V2Infer, V2ModelControl>;

struct V2Limits {
  ApiLimits api;
  std::size_t max_elements = 256;  // strings in one inference: the configuration's max_batch_size
  bool model_control = false;      // the repository's load and unload routes are served
};

// One per event loop: it owns a JSON parser whose buffers are reused between requests.
class V2Api {
 public:
  // `trace_settings`: this process's (its door tracer's), served by the trace extension's routes;
  // null while tracing is off.
  V2Api(const V2Limits& limits, ApiContext& context, tracing::TraceSettings* trace_settings = nullptr);

  // Precondition: is_v2_target(request.target()).
  V2Action route(const Request& request);

 private:
  V2Action model_route(const Request& request, std::string_view rest);
  V2Action infer(const Request& request, oip::ModelCatalog::Model model);
  std::optional<Response> read_input(const oip::ModelDescription& model, simdjson::dom::object input,
                                     std::string_view binary, std::size_t& binary_used, V2Infer& infer);
  std::optional<Response> read_parameters(simdjson::dom::object root, V2Infer& infer);
  std::optional<Response> read_outputs(const oip::ModelDescription& model, simdjson::dom::object root,
                                       V2Infer& infer);
  // The daemon's readiness; for a model, also whether it can run requests now.
  Response ready(const oip::ModelDescription* model = nullptr);
  // An optional body (empty: `root` stays empty) that must otherwise be a JSON object: the 400
  // naming `what` when it is not.
  std::optional<Response> read_optional_object(const Request& request, std::string_view what,
                                               std::optional<simdjson::dom::object>& root);
  // POST /v2/repository/index: every model with its state (Triton's model repository extension).
  Response repository_index(const Request& request);
  // POST /v2/repository/models/NAME/load|unload (the same extension's model control).
  V2Action repository_control(const Request& request, std::string_view rest);
  Response statistics(std::span<const oip::ModelCatalog::Model> models);
  // GET or POST /v2[/models/NAME]/trace/setting (Triton's trace extension; v2_trace_setting.cpp):
  // `model` empty for the global settings.
  Response trace_setting(const Request& request, std::string_view model);

  V2Limits limits_;
  ApiContext& context_;  // borrowed; outlives the V2Api
  tracing::TraceSettings* trace_settings_;  // borrowed, or null
  simdjson::dom::parser json_;
};

// {"error": message} with the given status.
Response v2_error(unsigned status, std::string_view message, unsigned retry_after_s = 0);

// 405 naming the methods the resource allows, in the message and in Allow.
Response v2_method_not_allowed(std::string_view allow);

// The protocol's mapping of a client-library error: overloaded `overload` (503 or 429), deadline
// 504, too large or not UTF-8 400, and so on.
Response v2_response_for_error(const Error& error, oip::OverloadStatus overload);

// The answer to an inference whose strings were all answered: results[i] answers inputs[i].
// Precondition: each is ok() (a failure answers with v2_response_for_error instead).
Response v2_infer_response(const V2Reply& reply, std::span<Result> results);

}  // namespace batchd::http

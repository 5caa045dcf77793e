// An Open Inference Protocol gRPC inference, checked and taken apart (ModelInferRequest → the
// strings that go to the daemon), and its answer put together (the outputs → ModelInferResponse),
// with the protocol's status codes for every fault. Free of threads and of the daemon, so the
// unit tests and the hostile-input tests drive it directly.
#pragma once

#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client_lib/client.hpp"
#include "oip/errors.hpp"
#include "oip/grpc_service.pb.h"
#include "oip/model.hpp"

namespace batchd::grpcfront {

struct InferLimits {
  std::size_t max_elements = 256;                  // strings in one request (max_batch_size)
  std::chrono::milliseconds default_timeout{5000};  // with neither a deadline nor a timeout
  std::chrono::milliseconds max_timeout{60000};
};

// What the answer needs from the request.
struct InferReply {
  std::string id;
  std::vector<std::int64_t> shape;
  oip::ModelCatalog::Model model = oip::default_catalog().models().front();  // the model the request named
};

struct ParsedInfer {
  // Views into the request message: valid while it is.
  std::vector<std::string_view> inputs;
  InferReply reply;
  std::optional<std::chrono::milliseconds> timeout;  // the "timeout" parameter (µs), capped; if given
  Priority priority = Priority::kNormal;  // the "priority" parameter: a claim, capped at the caller's grant later
};

// Triton's priority level (1 is the highest; 0 is the model's default) as batchd's class: 0 and 2
// normal, 1 high, 3 and above low (a Triton model with priority_levels 3 and default level 2
// reads the same).
Priority priority_of_level(std::uint64_t level) noexcept;

// Checks `request` and fills `out`. NOT_FOUND for a model or version not in `models`,
// INVALID_ARGUMENT (naming the fault) for anything else wrong; `max_input_bytes` 0 skips the size
// check (the daemon checks again).
grpc::Status parse_infer_request(const inference::ModelInferRequest& request, const oip::ModelCatalog& models,
                                 const InferLimits& limits, std::uint32_t max_input_bytes, ParsedInfer& out);

// The response: the outputs in order, as one BYTES tensor in raw_output_contents (as Triton
// answers over gRPC). Precondition: every result is ok().
void fill_infer_response(const InferReply& reply, std::span<Result> results, inference::ModelInferResponse& response);

// The protocol's status for a client-library error: overloaded as `overload` says, deadline
// DEADLINE_EXCEEDED, too large or not UTF-8 INVALID_ARGUMENT, and so on.
grpc::Status status_for_error(const Error& error, oip::OverloadStatus overload);

}  // namespace batchd::grpcfront

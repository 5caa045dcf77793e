// The gRPC transport: each request goes as the Open Inference Protocol's ModelInfer (one string,
// a [1, 1] BYTES tensor in raw_input_contents) to batchd-grpc, or to any server of the same
// service (inference.GRPCInferenceService, as Triton serves it). Closed-loop threads call with the
// synchronous stub; each open-loop lane starts calls with the asynchronous API and takes their
// completions from a CompletionQueue of its own. The requests spread over several channels, each
// its own HTTP/2 connection, so they do not all ride one connection to one of the server's
// I/O threads.
#pragma once

#include <memory>

#include "base/expected.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_transport.hpp"

namespace batchd::stress {

// Opens options.connections channels to options.grpc_target and waits until each is connected
// (options.connect_timeout each), so connecting is not charged to the first requests; or says
// why it could not. `options` and `inputs` outlive the transport.
Expected<std::unique_ptr<Transport>> make_grpc_transport(const Options& options, const InputPool& inputs);

}  // namespace batchd::stress

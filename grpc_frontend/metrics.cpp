#include "grpc_frontend/metrics.hpp"

#include <fmt/format.h>

#include <iterator>

namespace batchd::grpcfront {

std::string render_metrics(const ServiceContext& context) {
  std::string out;
  auto to = std::back_inserter(out);
  const oip::InferStatistics s = context.counters.total();
  fmt::format_to(to,
                 "# HELP batchd_grpc_inferences_total Inferences answered, by outcome.\n"
                 "# TYPE batchd_grpc_inferences_total counter\n"
                 "batchd_grpc_inferences_total{{outcome=\"success\"}} {}\n"
                 "batchd_grpc_inferences_total{{outcome=\"failure\"}} {}\n"
                 "# HELP batchd_grpc_inference_strings_total Strings in the inferences that succeeded.\n"
                 "# TYPE batchd_grpc_inference_strings_total counter\n"
                 "batchd_grpc_inference_strings_total {}\n"
                 "# HELP batchd_grpc_calls_open Inference calls and streams open now.\n"
                 "# TYPE batchd_grpc_calls_open gauge\n"
                 "batchd_grpc_calls_open {}\n",
                 s.success_count, s.fail_count, s.inference_count, context.calls.load(std::memory_order_relaxed));
  grants::render_grant_metrics(out, "batchd_grpc", context.grant_counters.snapshot());
  return out;
}

}  // namespace batchd::grpcfront

// batchd-grpc's own counters in the Prometheus text format, for --metrics-listen: its inferences,
// its open calls, and what the grant check did (frontend/grant_counters.hpp). The daemon's series
// are the daemon's (its own --metrics-listen, or batchd-http's /metrics).
#pragma once

#include <string>

#include "grpc_frontend/service.hpp"

namespace batchd::grpcfront {

std::string render_metrics(const ServiceContext& context);

}  // namespace batchd::grpcfront

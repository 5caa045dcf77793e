// --overload-status, the same flag on batchd-http and batchd-grpc.
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "oip/errors.hpp"

namespace batchd::oip {

inline void add_overload_status_flag(CLI::App& app, OverloadStatus& status) {
  const std::map<std::string, OverloadStatus> names{{"503", OverloadStatus::k503}, {"429", OverloadStatus::k429}};
  app.add_option("--overload-status", status,
                 "a request shed for want of room: 503 (gRPC UNAVAILABLE; default, which HAProxy's retry-on can "
                 "retry) or 429 (RESOURCE_EXHAUSTED; balancers do not count it toward ejecting the node)")
      ->transform(CLI::CheckedTransformer(names));
}

}  // namespace batchd::oip

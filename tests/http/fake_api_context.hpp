// The process around the HTTP API, faked for the protocol-layer tests: readiness, the daemon's
// input limit, the inference statistics and the models are whatever the test sets.
#pragma once

#include <cstdint>
#include <string>

#include "frontend/http_api.hpp"

namespace batchd::http::testing {

class FakeContext final : public ApiContext {
 public:
  Readiness readiness() override { return ready ? Readiness{true, {}, {}} : Readiness{false, "overloaded", "busy"}; }
  std::string metrics_text() override { return "batchd_http_workers 1\n"; }
  std::uint32_t max_input_bytes() override { return max_input; }
  InferStatistics infer_statistics() override { return statistics; }
  const oip::ModelCatalog& models() override { return catalog; }

  bool ready = true;
  std::uint32_t max_input = 1024;
  InferStatistics statistics;
  oip::ModelCatalog catalog{{oip::default_model()}};
};

}  // namespace batchd::http::testing

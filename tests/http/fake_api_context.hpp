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
  InferStatistics infer_statistics(std::uint32_t model) override { return model == 0 ? statistics : other_statistics; }
  std::vector<oip::ModelTimes> model_times() override { return {times}; }
  const oip::ModelCatalog& models() override { return catalog; }

  bool ready = true;
  std::uint32_t max_input = 1024;
  InferStatistics statistics;
  InferStatistics other_statistics{};  // of every model but the default
  oip::ModelTimes times{};  // the daemon's, of the default model
  oip::ModelCatalog catalog{{oip::default_model()}};
};

}  // namespace batchd::http::testing

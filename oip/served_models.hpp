// The catalog a front-end serves: the models its daemon publishes (DaemonStatus::models), each
// described as oip::served_model does. Header-only: the protocol-neutral library does not link
// the client library, which the front-ends do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client_lib/client.hpp"
#include "oip/infer_counters.hpp"
#include "oip/model.hpp"

namespace batchd::oip {

// How often a front-end reads its daemon's models table again: a model a restarted daemon adds is
// served within this.
inline constexpr std::int64_t kCatalogReadNs = 1'000'000'000;

// nullptr for a daemon that publishes no models table: it serves the default model alone.
inline std::shared_ptr<const ModelCatalog> served_catalog(const DaemonStatus& status) {
  if (status.models.empty()) return nullptr;
  std::vector<ModelDescription> models;
  models.reserve(status.models.size());
  for (std::size_t m = 0; m < status.models.size(); ++m) {
    const DaemonStatus::Model& model = status.models[m];
    if (model.state == "absent") continue;
    models.push_back(served_model(model.name, model.version));
    models.back().id = static_cast<std::uint32_t>(m);
    models.back().response_cache = model.cache_enabled;
    if (model.state == "ready") continue;
    if (model.state == "unloading" || model.state == "unloaded" || model.state == "loading") {
      models.back().unavailable = "model " + model.name + " is " + model.state;
    } else if (model.state == "warming") {
      models.back().unavailable = "model " + model.name + " is warming up (its warm-up batches run first)";
    } else {
      models.back().unavailable = model.backend == "workers" ? "no worker serving model " + model.name + " is attached"
                                                             : "no device can run model " + model.name + " now";
    }
  }
  return std::make_shared<const ModelCatalog>(std::move(models));
}

// The daemon's times for each model, by id.
inline std::vector<ModelTimes> model_times(const DaemonStatus& status) {
  std::vector<ModelTimes> out;
  out.reserve(status.models.size());
  for (const DaemonStatus::Model& m : status.models) {
    out.push_back({m.inferences, m.batches, m.queue_ns, m.compute_ns, m.cache_hits, m.cache_hit_ns, m.cache_misses,
                   m.cache_miss_ns});
  }
  return out;
}

}  // namespace batchd::oip

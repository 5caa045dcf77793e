// The catalog a front-end serves: the models its daemon publishes (DaemonStatus::models), each
// described as oip::served_model does. Header-only: the protocol-neutral library does not link
// the client library, which the front-ends do.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client_lib/client.hpp"
#include "oip/infer_counters.hpp"
#include "oip/model.hpp"

namespace batchd::oip {

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
    if (model.state == "ready") continue;
    models.back().unavailable = model.backend == "workers" ? "no worker serving model " + model.name + " is attached"
                                                           : "no device can run model " + model.name + " now";
  }
  return std::make_shared<const ModelCatalog>(std::move(models));
}

// The daemon's times for the model of id `model` (zeros for an id it does not list).
inline ModelTimes model_times(const DaemonStatus& status, std::uint32_t model) {
  if (model >= status.models.size()) return {};
  const DaemonStatus::Model& m = status.models[model];
  return {m.inferences, m.batches, m.queue_ns, m.compute_ns};
}

}  // namespace batchd::oip

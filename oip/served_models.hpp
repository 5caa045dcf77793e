// The catalog a front-end serves: the models its daemon publishes (DaemonStatus::models), each
// described as oip::served_model does. Header-only: the protocol-neutral library does not link
// the client library, which the front-ends do.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client_lib/client.hpp"
#include "oip/model.hpp"

namespace batchd::oip {

// nullptr for a daemon that publishes no models table: it serves the default model alone.
inline std::shared_ptr<const ModelCatalog> served_catalog(const DaemonStatus& status) {
  if (status.models.empty()) return nullptr;
  std::vector<ModelDescription> models;
  models.reserve(status.models.size());
  for (const DaemonStatus::Model& model : status.models) {
    if (model.state == "absent") continue;
    models.push_back(served_model(model.name, model.version));
    if (model.state == "ready") continue;
    models.back().unavailable = model.backend == "workers" ? "no worker serving model " + model.name + " is attached"
                                                           : "no device can run model " + model.name + " now";
  }
  return std::make_shared<const ModelCatalog>(std::move(models));
}

}  // namespace batchd::oip

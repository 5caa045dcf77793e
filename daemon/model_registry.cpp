#include "daemon/model_registry.hpp"

#include <algorithm>

namespace batchd {

ModelPipeline& ModelRegistry::add(std::unique_ptr<ModelPipeline> model) {
  ModelPipeline& added = *model;
  std::lock_guard lock(mu_);
  models_.push_back(std::move(model));
  if (added.by_workers()) by_workers_.push_back(&added);
  return added;
}

ModelPipeline* ModelRegistry::named(std::string_view name) const noexcept {
  const auto it = std::find_if(models_.begin(), models_.end(), [&](const auto& m) {
    return m->config().name == name && m->lifecycle() != ModelPipeline::Lifecycle::kRemoved;
  });
  return it != models_.end() ? it->get() : nullptr;
}

}  // namespace batchd

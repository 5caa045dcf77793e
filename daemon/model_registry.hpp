// The models a daemon serves, by id (a request's model field, a status-table row) and by name.
// Ids are never reused: a model a reload removes keeps its place (kRemoved), so a client that
// resolved its name once is never handed another model's answers. Only the drain thread adds;
// any other thread that walks the models holds mu() (the status publisher, update_limits).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "daemon/model_pipeline.hpp"

namespace batchd {

class ModelRegistry {
 public:
  using Models = std::vector<std::unique_ptr<ModelPipeline>>;

  // Appends the model at id size(): the caller made it with that id. Holds mu() while it does.
  ModelPipeline& add(std::unique_ptr<ModelPipeline> model);

  // The model of that name that is not removed, or nullptr.
  [[nodiscard]] ModelPipeline* named(std::string_view name) const noexcept;
  // Those run by worker processes, in id order.
  [[nodiscard]] const std::vector<ModelPipeline*>& served_by_workers() const noexcept { return by_workers_; }

  [[nodiscard]] const Models& all() const noexcept { return models_; }
  [[nodiscard]] std::size_t size() const noexcept { return models_.size(); }
  [[nodiscard]] const std::unique_ptr<ModelPipeline>& operator[](std::size_t id) const noexcept { return models_[id]; }
  // The default model (batchstring), id 0.
  [[nodiscard]] ModelPipeline& front() const noexcept { return *models_.front(); }
  [[nodiscard]] Models::const_iterator begin() const noexcept { return models_.begin(); }
  [[nodiscard]] Models::const_iterator end() const noexcept { return models_.end(); }

  [[nodiscard]] std::mutex& mu() const noexcept { return mu_; }

 private:
  Models models_;
  std::vector<ModelPipeline*> by_workers_;
  mutable std::mutex mu_;
};

}  // namespace batchd

// The attached worker processes, by their connection's id: which model each serves, its device
// there, its link, and the places they hold on the status page's workers table. Drain thread
// only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "daemon/worker_link.hpp"

namespace batchd {

class ModelPipeline;

struct AttachedWorker {
  ModelPipeline* model = nullptr;  // the model it serves
  unsigned slot = 0;               // its device in that model's router
  std::shared_ptr<WorkerLink> link;
};

class WorkerRoster {
 public:
  [[nodiscard]] bool empty() const noexcept { return by_id_.empty(); }
  void add(std::uint64_t id, AttachedWorker worker) { by_id_.emplace(id, std::move(worker)); }
  // nullptr when none has that id (it was dropped).
  [[nodiscard]] AttachedWorker* find(std::uint64_t id) noexcept;
  // Removes the worker and returns it; nothing when none has that id.
  std::optional<AttachedWorker> take(std::uint64_t id);
  // Any worker's id (for dropping them all); the roster must not be empty.
  [[nodiscard]] std::uint64_t any_id() const noexcept { return by_id_.begin()->first; }
  // The ids of the workers serving `model`.
  [[nodiscard]] std::vector<std::uint64_t> serving(const ModelPipeline* model) const;
  // The lowest place on the status page's workers table that no attached worker holds
  // (WorkerIdentity::kNoPlace: every place is held).
  [[nodiscard]] unsigned free_place() const noexcept;

 private:
  std::unordered_map<std::uint64_t, AttachedWorker> by_id_;
};

}  // namespace batchd

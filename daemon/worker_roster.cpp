#include "daemon/worker_roster.hpp"

#include <algorithm>
#include <array>

#include "shm/status_page.hpp"

namespace batchd {

AttachedWorker* WorkerRoster::find(std::uint64_t id) noexcept {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::optional<AttachedWorker> WorkerRoster::take(std::uint64_t id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  AttachedWorker worker = std::move(it->second);
  by_id_.erase(it);
  return worker;
}

std::vector<std::uint64_t> WorkerRoster::serving(const ModelPipeline* model) const {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, worker] : by_id_) {
    if (worker.model == model) ids.push_back(id);
  }
  return ids;
}

unsigned WorkerRoster::free_place() const noexcept {
  std::array<bool, shm::kStatusDevices> held{};
  for (const auto& [id, worker] : by_id_) {
    if (worker.link->who().place < shm::kStatusDevices) held[worker.link->who().place] = true;
  }
  const auto free = std::find(held.begin(), held.end(), false);
  return free == held.end() ? WorkerIdentity::kNoPlace : static_cast<unsigned>(free - held.begin());
}

}  // namespace batchd

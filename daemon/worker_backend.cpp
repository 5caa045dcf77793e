#include "daemon/worker_backend.hpp"

#include <algorithm>

namespace batchd {

WorkerBackend::WorkerBackend(WorkerBackendOptions options) : options_(options) {
  options_.max_workers = std::max(1U, options_.max_workers);
  options_.lanes_per_worker = std::clamp(options_.lanes_per_worker, 1U, shm::kMaxWorkerBuffers);
  slots_.resize(options_.max_workers);
}

BackendStatus WorkerBackend::run(LaneId lane, const BatchInput& in, BatchOutput& out) {
  const std::shared_ptr<WorkerLink> link = at(lane.device);
  if (link == nullptr) return BackendStatus::device_gone("no worker in place " + std::to_string(lane.device));
  return link->run(lane.stream, in, out);
}

void WorkerBackend::device_hung(unsigned device) noexcept {
  if (const auto link = at(device)) link->hang_up("ran a batch past the hang timeout (--device-timeout-ms)");
}

void WorkerBackend::shutdown() noexcept {
  std::lock_guard lock(mu_);
  for (const auto& link : slots_) {
    if (link != nullptr) link->hang_up("the daemon is stopping");
  }
}

std::optional<unsigned> WorkerBackend::free_slot() const {
  std::lock_guard lock(mu_);
  const auto it = std::find(slots_.begin(), slots_.end(), nullptr);
  if (it == slots_.end()) return std::nullopt;
  return static_cast<unsigned>(it - slots_.begin());
}

void WorkerBackend::install(unsigned slot, std::shared_ptr<WorkerLink> link) {
  std::lock_guard lock(mu_);
  slots_.at(slot) = std::move(link);
}

void WorkerBackend::remove(unsigned slot) {
  std::shared_ptr<WorkerLink> gone;  // released outside the lock
  std::lock_guard lock(mu_);
  gone.swap(slots_.at(slot));
}

std::shared_ptr<WorkerLink> WorkerBackend::at(unsigned slot) const {
  std::lock_guard lock(mu_);
  return slot < slots_.size() ? slots_[slot] : nullptr;
}

unsigned WorkerBackend::attached() const {
  std::lock_guard lock(mu_);
  return static_cast<unsigned>(std::count_if(slots_.begin(), slots_.end(), [](const auto& l) { return l != nullptr; }));
}

}  // namespace batchd

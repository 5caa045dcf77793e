// The `workers` backend: the daemon runs no model of its own; each attached worker process is a
// device, its buffers that device's streams. The places are fixed at start (--max-workers, each
// with --worker-lanes lanes) and filled and emptied as workers come and go; the router sees an
// empty place as an absent device (Router::open_device, close_device).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/backend.hpp"
#include "daemon/worker_link.hpp"

namespace batchd {

struct WorkerBackendOptions {
  unsigned max_workers = 8;
  unsigned lanes_per_worker = 4;
};

class WorkerBackend final : public Backend {
 public:
  explicit WorkerBackend(WorkerBackendOptions options);

  [[nodiscard]] std::string_view name() const noexcept override { return "workers"; }
  [[nodiscard]] unsigned devices() const noexcept override { return options_.max_workers; }
  [[nodiscard]] unsigned streams_per_device() const noexcept override { return options_.lanes_per_worker; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;
  // A hung worker is dropped: its run returns, and a worker that comes back is a new device.
  void device_hung(unsigned device) noexcept override;
  void shutdown() noexcept override;

  // The daemon's attach thread.
  [[nodiscard]] std::optional<unsigned> free_slot() const;
  void install(unsigned slot, std::shared_ptr<WorkerLink> link);
  void remove(unsigned slot);
  // Any thread: the worker in a place (nullptr: none), and how many are attached.
  [[nodiscard]] std::shared_ptr<WorkerLink> at(unsigned slot) const;
  [[nodiscard]] unsigned attached() const;

 private:
  WorkerBackendOptions options_;
  mutable std::mutex mu_;  // guards slots_
  std::vector<std::shared_ptr<WorkerLink>> slots_;
};

}  // namespace batchd

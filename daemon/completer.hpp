// Writes answers into completion slots and wakes the callers that wait: a futex wake only for a
// caller that flagged itself, an eventfd signal at most once per batch per client.
#pragma once

#include <string_view>
#include <vector>

#include "daemon/batch.hpp"
#include "daemon/stats.hpp"
#include "shm/layout.hpp"

namespace batchd {

class Completer {
 public:
  explicit Completer(DaemonStats& stats) noexcept : stats_(stats) {}

  // Completes every request of a batch from its output (or, when the backend failed or returned
  // the wrong count, with that error). Thread-safe; allocates nothing in steady state.
  void complete_batch(Batch& batch, const BackendStatus& status) noexcept;

  // Completes every request of a batch with the same error (no device could run it).
  void complete_batch_with(Batch& batch, shm::WireStatus status, std::string_view message) noexcept;

  // Completes one request outside a batch (rejected at admission). Signals its eventfd at once.
  void complete_one(const RequestRef& request, shm::WireStatus status,
                    std::string_view payload) noexcept;
  // complete_one for a request refused before it ran, counted as rejected.
  void reject(const RequestRef& request, shm::WireStatus status, std::string_view why) noexcept {
    stats_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
    complete_one(request, status, why);
  }

 private:
  // Returns whether the caller asked for an eventfd signal.
  bool write_slot(const RequestRef& request, shm::WireStatus status,
                  std::string_view payload) noexcept;

  DaemonStats& stats_;
};

}  // namespace batchd

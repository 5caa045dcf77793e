// Writes answers into completion slots and wakes the callers that wait: a futex wake only for a
// caller that flagged itself, an eventfd signal at most once per batch per client. An answer also
// goes to the requests that followed it (daemon/coalescer.hpp) and, for a cached model, into the
// response cache (daemon/response_caches.hpp).
#pragma once

#include <string_view>
#include <vector>

#include "daemon/batch.hpp"
#include "daemon/request_tracer.hpp"
#include "daemon/response_caches.hpp"
#include "daemon/stats.hpp"
#include "shm/layout.hpp"

namespace batchd {

class Completer {
 public:
  Completer(DaemonStats& stats, ResponseCaches& caches) noexcept : stats_(stats), caches_(caches) {}

  // Before any batch: where traced requests' spans are made (none: nothing is traced).
  void set_tracer(RequestTracer* tracer) noexcept { tracer_ = tracer; }

  // Where answers are kept (the pipelines look there before a request runs).
  [[nodiscard]] ResponseCaches& caches() const noexcept { return caches_; }

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
  // write_slot, then the same answer for the requests that followed it, if it led any. Calls
  // `asked_for_event` with each request whose caller asked for an eventfd signal.
  template <class F>
  void answer(const RequestRef& request, shm::WireStatus status, std::string_view payload,
              F&& asked_for_event) noexcept;
  // The second half of answer(): the followers of a request that led (daemon/coalescer.hpp).
  template <class F>
  void answer_followers(const RequestRef& request, shm::WireStatus status, std::string_view payload,
                        F&& asked_for_event) noexcept;
  // Keeps a successful answer in the request's cache segment (a request looked up there).
  void store(const RequestRef& request, std::string_view input, std::string_view output) noexcept;

  DaemonStats& stats_;
  ResponseCaches& caches_;
  RequestTracer* tracer_ = nullptr;
};

}  // namespace batchd

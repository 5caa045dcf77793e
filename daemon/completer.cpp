#include "daemon/completer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "daemon/coalescer.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"

namespace batchd {

bool Completer::write_slot(const RequestRef& request, shm::WireStatus status,
                           std::string_view payload) noexcept {
  ClientSession& session = *request.session;
  const shm::SegmentView& view = session.view();
  const std::uint32_t max_output = view.geometry().params.max_output_bytes;
  char message[160];
  if (payload.size() > max_output) {
    const auto n = fmt::format_to_n(message, sizeof(message),
                                    "backend output of {} bytes exceeds the {}-byte output limit",
                                    payload.size(), max_output);
    payload = std::string_view(message, n.size < sizeof(message) ? n.size : sizeof(message));
    status = shm::WireStatus::kBackendError;
  }
  shm::CompletionSlotHeader& slot = *view.completion_slot(request.slot);
  std::memcpy(view.completion_output(request.slot), payload.data(), payload.size());
  slot.status = static_cast<std::uint32_t>(status);
  slot.output_bytes = static_cast<std::uint32_t>(payload.size());
  // The private in-flight mark must clear before DONE is visible: a client may resubmit the slot
  // the moment it sees DONE, and the drain loop must not take that for a double submission.
  session.clear_in_flight(request.slot);
  shm::RequestSlotHeader& req = *view.request_slot(request.slot);
  shm::store_and_wake(slot.state, shm::make_state(request.generation, shm::SlotPhase::kDone),
                      req.notify, shm::kNotifyFutex);
  const bool ok = status == shm::WireStatus::kOk;
  (ok ? stats_.requests_ok : stats_.requests_failed).fetch_add(1, std::memory_order_relaxed);
  if (request.model < stats_.by_model.size()) {
    ModelCounters& model = stats_.by_model[request.model];
    (ok ? model.requests_ok : model.requests_failed).fetch_add(1, std::memory_order_relaxed);
  }
  return (req.notify.load(std::memory_order_relaxed) & shm::kNotifyEventfd) != 0;
}

template <class F>
void Completer::answer(const RequestRef& request, shm::WireStatus status, std::string_view payload,
                       F&& asked_for_event) noexcept {
  if (write_slot(request, status, payload)) asked_for_event(request);
  answer_followers(request, status, payload, asked_for_event);
}

template <class F>
void Completer::answer_followers(const RequestRef& request, shm::WireStatus status, std::string_view payload,
                                 F&& asked_for_event) noexcept {
  if (request.lead == 0) return;
  // Per thread, so answering allocates nothing once warm.
  thread_local std::vector<RequestRef> followers;
  followers.clear();
  try {
    request.coalescer->settle(request.lead, status, followers);
  } catch (const std::exception&) {
    // Out of memory: the followers stay with the entry, for its next leader; their callers'
    // deadlines end their wait meanwhile.
  }
  if (request.model < stats_.by_model.size()) {
    stats_.by_model[request.model].coalesced.fetch_add(followers.size(), std::memory_order_relaxed);
  }
  for (const RequestRef& follower : followers) {
    if (write_slot(follower, status, payload)) asked_for_event(follower);
  }
  followers.clear();  // drops their session references now
}

void Completer::complete_one(const RequestRef& request, shm::WireStatus status,
                             std::string_view payload) noexcept {
  answer(request, status, payload, [](const RequestRef& r) {
    const shm::RingEntry entry = shm::make_ring_entry(r.slot, r.generation);
    r.session->publish_finished(std::span(&entry, 1));
    r.session->signal_events();
  });
  if (tracer_ != nullptr) tracer_->answered_unrun(request, status, payload);
}

namespace {

// The asynchronous requests a batch answered, to tell each client about its own with one
// finished-list append and one event; per thread, so completing allocates nothing once warm.
struct Finished {
  ClientSession* session;
  shm::RingEntry entry;
};

std::vector<Finished>& finished_scratch() {
  thread_local std::vector<Finished> scratch;
  scratch.clear();
  return scratch;
}

void note_finished(std::vector<Finished>& scratch, const RequestRef& request) {
  scratch.push_back(Finished{request.session.get(), shm::make_ring_entry(request.slot, request.generation)});
}

// One append and one event per client: a batch holds few clients, so grouping by scanning is
// cheaper than anything that allocates.
void tell_clients(std::vector<Finished>& scratch) noexcept {
  thread_local std::vector<shm::RingEntry> entries;
  for (std::size_t first = 0; first < scratch.size(); ++first) {
    ClientSession* session = scratch[first].session;
    if (session == nullptr) continue;  // told already
    entries.clear();
    for (std::size_t i = first; i < scratch.size(); ++i) {
      if (scratch[i].session != session) continue;
      entries.push_back(scratch[i].entry);
      scratch[i].session = nullptr;
    }
    session->publish_finished(entries);
    session->signal_events();
  }
}

}  // namespace

void Completer::complete_batch_with(Batch& batch, shm::WireStatus status,
                                    std::string_view message) noexcept {
  auto& scratch = finished_scratch();
  stats_.batch_failures.fetch_add(1, std::memory_order_relaxed);
  for (const RequestRef& request : batch.requests) {
    answer(request, status, message, [&](const RequestRef& r) { note_finished(scratch, r); });
  }
  tell_clients(scratch);
  if (tracer_ != nullptr) {
    for (const RequestRef& request : batch.requests) tracer_->answered_unrun(request, status, message);
  }
}

void Completer::complete_batch(Batch& batch, const BackendStatus& status) noexcept {
  auto& scratch = finished_scratch();
  const std::size_t n = batch.size();
  std::string error;
  if (!status.ok) {
    error = "backend error: " + status.message;
  } else if (batch.output.size() != n) {
    error = fmt::format("backend error: backend returned {} results for {} inputs",
                        batch.output.size(), n);
  }
  stats_.record_batch(n, n > 0 ? batch.requests.front().model : RequestRef::kNoModel);  // a batch is one model's
  if (!error.empty()) stats_.batch_failures.fetch_add(1, std::memory_order_relaxed);
  const auto notify = [&](const RequestRef& r) { note_finished(scratch, r); };
  if (!error.empty()) {
    for (const RequestRef& request : batch.requests) answer(request, shm::WireStatus::kBackendError, error, notify);
    tell_clients(scratch);
    if (tracer_ != nullptr) tracer_->batch_ran(batch, error);
    return;
  }
  std::int64_t store_start_ns = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RequestRef& request = batch.requests[i];
    const std::string_view output = batch.output.at(i);
    if (write_slot(request, shm::WireStatus::kOk, output)) notify(request);
    // Stored after its caller is answered (off its critical path), before any follower is: a
    // request for the input that comes meanwhile follows this one, or finds the answer stored.
    if (request.cache_epoch != 0) {
      if (store_start_ns == 0) store_start_ns = shm::monotonic_ns();
      store(request, batch.input().at(i), output);
    }
    answer_followers(request, shm::WireStatus::kOk, output, notify);
  }
  tell_clients(scratch);
  if (tracer_ != nullptr) tracer_->batch_ran(batch, {});
  // A miss's time is its lookup's and its answer's store (Triton's miss duration).
  if (store_start_ns != 0 && batch.requests.front().model < stats_.by_model.size()) {
    const auto took_ns = static_cast<std::uint64_t>(shm::monotonic_ns() - store_start_ns);
    stats_.by_model[batch.requests.front().model].cache_miss_ns.fetch_add(took_ns, std::memory_order_relaxed);
  }
}

void Completer::store(const RequestRef& request, std::string_view input, std::string_view output) noexcept {
  shm::CacheWriter* cache = caches_.segment_for(*request.session, request.model);
  // An answer too large for its client was an error to it, and is one to every client.
  if (cache == nullptr || output.size() > request.session->view().geometry().params.max_output_bytes) return;
  try {
    (void)cache->insert(shm::CacheKey{request.model, request.cache_epoch, request.cache_scope}, request.cache_hash,
                        input, output);
  } catch (const std::exception&) {
    // Out of memory: not kept; the answer itself went out.
  }
}

}  // namespace batchd

#include "daemon/completer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

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
  if (status == shm::WireStatus::kOk) {
    stats_.requests_ok.fetch_add(1, std::memory_order_relaxed);
  } else {
    stats_.requests_failed.fetch_add(1, std::memory_order_relaxed);
  }
  return (req.notify.load(std::memory_order_relaxed) & shm::kNotifyEventfd) != 0;
}

void Completer::complete_one(const RequestRef& request, shm::WireStatus status,
                             std::string_view payload) noexcept {
  if (write_slot(request, status, payload)) request.session->signal_events();
}

namespace {

// Sessions of one batch that asked for an eventfd signal; per thread, so completing allocates
// nothing once warm.
std::vector<ClientSession*>& event_scratch() {
  thread_local std::vector<ClientSession*> scratch;
  scratch.clear();
  return scratch;
}

void note_event(std::vector<ClientSession*>& scratch, ClientSession* session) {
  if (std::find(scratch.begin(), scratch.end(), session) == scratch.end()) scratch.push_back(session);
}

}  // namespace

void Completer::complete_batch_with(Batch& batch, shm::WireStatus status,
                                    std::string_view message) noexcept {
  auto& scratch = event_scratch();
  stats_.batch_failures.fetch_add(1, std::memory_order_relaxed);
  for (const RequestRef& request : batch.requests) {
    if (write_slot(request, status, message)) note_event(scratch, request.session.get());
  }
  for (ClientSession* session : scratch) session->signal_events();
}

void Completer::complete_batch(Batch& batch, const BackendStatus& status) noexcept {
  auto& scratch = event_scratch();
  const std::size_t n = batch.size();
  std::string error;
  if (!status.ok) {
    error = "backend error: " + status.message;
  } else if (batch.output.size() != n) {
    error = fmt::format("backend error: backend returned {} results for {} inputs",
                        batch.output.size(), n);
  }
  stats_.record_batch(n);
  if (!error.empty()) stats_.batch_failures.fetch_add(1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    const RequestRef& request = batch.requests[i];
    const bool wants_event =
        error.empty() ? write_slot(request, shm::WireStatus::kOk, batch.output.at(i))
                      : write_slot(request, shm::WireStatus::kBackendError, error);
    if (wants_event) note_event(scratch, request.session.get());
  }
  for (ClientSession* session : scratch) session->signal_events();
}

}  // namespace batchd

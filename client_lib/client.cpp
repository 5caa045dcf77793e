#include "client_lib/client.hpp"

#include "client_lib/client_impl.hpp"

#include <poll.h>
#include <simdjson.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <thread>

#include "client_lib/attach.hpp"
#include "status/status_read.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/futex.hpp"
#include "shm/layout.hpp"
#include "shm/memfd_region.hpp"
#include "shm/ring.hpp"
#include "shm/segment_view.hpp"
#include "shm/status_page.hpp"

namespace batchd {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kOverloaded: return "overloaded";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kInvalidUtf8: return "invalid_utf8";
    case ErrorCode::kDaemonUnavailable: return "daemon_unavailable";
    case ErrorCode::kBackendError: return "backend_error";
    case ErrorCode::kBackendUnavailable: return "backend_unavailable";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kProtocolError: return "protocol_error";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kTooManyClients: return "too_many_clients";
    case ErrorCode::kUnknownModel: return "unknown_model";
  }
  return "unknown";
}

ClientImpl::ClientImpl(std::shared_ptr<Segment> segment, shm::UniqueFd event_fd,
                       const ClientOptions& options, std::string socket_path)
    : options_(options), socket_path_(std::move(socket_path)), event_fd_(std::move(event_fd)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)), current_(std::move(segment)) {
  max_input_bytes_.store(current_->max_input_bytes(), std::memory_order_relaxed);
  max_spinners_ = options_.max_spinning_callers != 0
                      ? options_.max_spinning_callers
                      : std::max(1U, std::thread::hardware_concurrency() / 2);
  slot_count_.store(current_->view.slot_count(), std::memory_order_relaxed);
  async_.reserve(current_->view.slot_count());
  finished_.reserve(current_->view.slot_count());
  finished_entries_.reserve(current_->view.finished_capacity());
  monitor_ = std::thread([this] { monitor(); });
}

ClientImpl::~ClientImpl() {
  if (monitor_.joinable()) {
    signal_eventfd(stop_fd_.get());
    monitor_.join();
  }
  stop_waker();
}

// ---- the monitor: notices the daemon's death and re-attaches -------------------------------

std::optional<Error> ClientImpl::check_input(std::string_view input) const {
  // While detached this is the last daemon's limit; a reattach re-checks against the new one.
  if (input.size() > max_input_bytes()) {
    return Error{ErrorCode::kTooLarge,
                 fmt::format("input of {} bytes exceeds the daemon's limit of {} bytes",
                             input.size(), max_input_bytes())};
  }
  if (!simdjson::validate_utf8(input.data(), input.size())) {
    return Error{ErrorCode::kInvalidUtf8, "input is not valid UTF-8"};
  }
  return std::nullopt;
}

Attempt<std::uint16_t> ClientImpl::intern_model_locked(std::string_view name) {
  if (name.empty()) return std::uint16_t{0};
  for (std::size_t i = 1; i < model_names_.size(); ++i) {
    if (model_names_[i] == name) return static_cast<std::uint16_t>(i);
  }
  if (model_names_.size() >= kMaxModelNames) {
    return Error{ErrorCode::kUnknownModel,
                 fmt::format("this client has named {} models already, its most; model '{}' not looked up",
                             kMaxModelNames - 1, name)};
  }
  model_names_.emplace_back(name);
  return static_cast<std::uint16_t>(model_names_.size() - 1);
}

std::optional<Error> ClientImpl::resolve_model_locked(Segment& seg, Request& request) {
  if (request.model_name == 0) {
    request.model = 0;
    return std::nullopt;
  }
  if (seg.model_ids.size() <= request.model_name) seg.model_ids.resize(model_names_.size(), kModelUnresolved);
  std::uint32_t& id = seg.model_ids[request.model_name];
  if (id == kModelUnresolved) {
    // Looked up again each time while the daemon lacks it: a reload may add it.
    const std::string& name = model_names_[request.model_name];
    const std::optional<std::uint32_t> found = find_model_id(*seg.status, seg.status_bytes, name);
    if (!found) {
      return Error{ErrorCode::kUnknownModel,
                   fmt::format("the batchd daemon at {} serves no model named '{}' (it serves: {})", socket_path_,
                               name, served_model_names(*seg.status, seg.status_bytes))};
    }
    id = *found;
  }
  request.model = id;
  return std::nullopt;
}

std::optional<Error> ClientImpl::write_locked(std::string_view input, std::string_view model, Use use,
                                              Request& request, std::string* cached) {
  Segment& seg = *current_;
  Attempt<std::uint16_t> name = intern_model_locked(model);
  if (!name) return name.error();
  request.model_name = *name;
  if (auto unknown = resolve_model_locked(seg, request)) return unknown;
  if (cached != nullptr && seg.cached_answer(request.model, request.cache_scope, input, *cached)) {
    request.cached = true;
    return std::nullopt;
  }
  if (seg.free.empty() && !seg.reclaim_abandoned()) {
    return Error{ErrorCode::kOverloaded,
                 fmt::format("all {} request slots of this client are in flight; retry later",
                             seg.view.slot_count())};
  }
  const std::uint32_t slot = seg.free.back();
  seg.free.pop_back();
  if (request.request_id == 0) request.request_id = next_request_id();
  const std::uint32_t generation =
      seg.write_request(slot, input.data(), static_cast<std::uint32_t>(input.size()), request.deadline_ns,
                        request.priority, use, request.request_id, request.model, request.cache_scope,
                        request.trace);
  if (!seg.stage(slot)) {
    // Cannot happen while slots == ring capacity, but a full ring must never lose a request.
    seg.slots[slot].use = Use::kFree;
    seg.free.push_back(slot);
    return Error{ErrorCode::kOverloaded, "the submission ring is full; retry later"};
  }
  request.at = Location{current_, slot, generation};
  if (use == Use::kSync) seg.slots[slot].waiter = &request;
  return std::nullopt;
}

std::optional<Error> ClientImpl::check_free_slots_locked(std::size_t needed) {
  Segment& seg = *current_;
  if (seg.free.size() < needed) (void)seg.reclaim_abandoned();
  if (seg.free.size() >= needed) return std::nullopt;
  return Error{ErrorCode::kOverloaded,
               fmt::format("{} requests need as many free slots, and {} of this client's {} are free; "
                           "retry later", needed, seg.free.size(), seg.view.slot_count())};
}

void ClientImpl::release_locked(const Location& at) noexcept {
  Segment& seg = *at.segment;
  SlotState& state = seg.slots[at.slot];
  if (state.generation != at.generation || (state.use != Use::kSync && state.use != Use::kAsync)) {
    return;  // a reattach moved the request away and already let this slot go
  }
  state.waiter = nullptr;
  if (!state.pushed || seg.slot_done(at.slot, at.generation)) {
    state.use = Use::kFree;
    seg.free.push_back(at.slot);
    return;
  }
  // Withdraws the request if the daemon has not taken it yet; either way the slot is reused only
  // after the daemon writes this generation's completion.
  seg.view.request_slot(at.slot)->cancel_generation.store(at.generation, std::memory_order_relaxed);
  state.use = Use::kAbandoned;
  seg.abandoned.push_back(at.slot);
}

Result ClientImpl::submit(std::string_view input, std::chrono::milliseconds timeout, const RequestOptions& options) {
  if (auto bad = check_input(input)) return Result::failure(bad->code, std::move(bad->message));
  Request request;
  request.deadline_ns = deadline_after(timeout);
  request.priority = wire_priority(options.priority);
  request.cache_scope = options.cache_scope;
  request.trace = options.trace;
  {
    std::lock_guard lock(mu_);
    std::string cached;
    if (auto bad = write_locked(input, options.model, Use::kSync, request, &cached)) {
      return Result::failure(bad->code, std::move(bad->message));
    }
    if (request.cached) return Result::success(std::move(cached));
    current_->publish();
  }
  return wait_sync(request, timeout);
}

std::vector<Result> ClientImpl::submit_many(std::span<const std::string_view> inputs,
                                            std::chrono::milliseconds timeout, const RequestOptions& options) {
  std::vector<std::optional<Result>> refused(inputs.size());
  // Sized once: a reattach finds each request through its address.
  std::vector<Request> requests(inputs.size());
  const std::int64_t deadline_ns = deadline_after(timeout);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (auto bad = check_input(inputs[i])) refused[i] = Result::failure(bad->code, std::move(bad->message));
  }
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (refused[i]) continue;
      requests[i].deadline_ns = deadline_ns;
      requests[i].priority = wire_priority(options.priority);
      requests[i].cache_scope = options.cache_scope;
      requests[i].trace = options.trace;
      std::string cached;
      if (auto bad = write_locked(inputs[i], options.model, Use::kSync, requests[i], &cached)) {
        refused[i] = Result::failure(bad->code, std::move(bad->message));
      } else if (requests[i].cached) {
        refused[i] = Result::success(std::move(cached));  // answered already: nothing to wait for
      }
    }
    current_->publish();
  }
  std::vector<Result> results;
  results.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    results.push_back(refused[i] ? std::move(*refused[i]) : wait_sync(requests[i], timeout));
  }
  return results;
}

// Waits for the request wherever it lives: in its segment's slot while that daemon is alive, or
// for the next reattach (which moves it) while none is attached.
Result ClientImpl::wait_sync(Request& request, std::chrono::milliseconds timeout) {
  sync_waiters_.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    std::atomic<unsigned>& waiters;
    ~Leave() { waiters.fetch_sub(1, std::memory_order_relaxed); }
  } leave{sync_waiters_};
  const std::int64_t started_ns = shm::monotonic_ns();
  std::int64_t spin_ns = spin_budget_ns();
  for (;;) {
    Location at;
    std::uint32_t seq = 0;
    {
      std::lock_guard lock(mu_);
      if (request.failure) {
        release_locked(request.at);
        return Result::failure(request.failure->code, std::move(request.failure->message));
      }
      at = request.at;
      seq = reattach_seq_.load(std::memory_order_relaxed);
    }
    const Segment& seg = *at.segment;
    if (seg.slot_done(at.slot, at.generation)) {
      note_answer_time(shm::monotonic_ns() - started_ns);
      return finish_sync(request, at);
    }
    const std::int64_t now_ns = shm::monotonic_ns();
    if (now_ns >= request.deadline_ns) {
      std::lock_guard lock(mu_);
      return expire_locked(request, timeout);
    }
    const std::int64_t slice_end = std::min(request.deadline_ns, now_ns + kWaitSliceNs);
    if (seg.dead.load(std::memory_order_seq_cst)) {
      (void)shm::futex_wait_until(reattach_seq_, seq, std::min(slice_end, now_ns + kDetachedPollNs));
      continue;
    }
    const std::uint32_t done_state = shm::make_state(at.generation, shm::SlotPhase::kDone);
    const auto done = [&](std::uint32_t s) {
      return s == done_state || seg.dead.load(std::memory_order_seq_cst);
    };
    const std::atomic<std::uint32_t>& state = seg.view.completion_slot(at.slot)->state;
    if (spin_ns > 0) {
      const bool may_spin = sync_waiters_.load(std::memory_order_relaxed) <= max_spinners_;
      const bool answered = may_spin && shm::spin_until_done(state, spin_ns, done);
      spin_ns = 0;             // one spin per call, not per pass
      if (answered) continue;  // the next pass sees it done
    }
    (void)shm::wait_for_change(state, seg.view.request_slot(at.slot)->notify, shm::kNotifyFutex, 0,
                               slice_end, done);
  }
}

std::int64_t ClientImpl::spin_budget_ns() const noexcept {
  const std::int64_t most_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.spin).count();
  const std::int64_t typical_ns = answer_ns_.load(std::memory_order_relaxed);
  // Unmeasured: the configured spin. Answers that take longer than that: no spin at all, the
  // caller would only burn the core before sleeping anyway. Otherwise twice the typical answer
  // time, which catches most answers without spinning long past them.
  if (typical_ns == 0) return most_ns;
  if (typical_ns > most_ns) return 0;
  return std::min(most_ns, 2 * typical_ns + 1'000);
}

void ClientImpl::note_answer_time(std::int64_t ns) noexcept {
  // Racy read-modify-write across callers: a lost sample only slows the average down.
  const std::int64_t old = answer_ns_.load(std::memory_order_relaxed);
  answer_ns_.store(old == 0 ? ns : (old * 7 + ns) / 8, std::memory_order_relaxed);
}

Result ClientImpl::finish_sync(Request& request, const Location& at) {
  Result result = at.segment->read_result(at.slot);
  std::lock_guard lock(mu_);
  // Normally request.at == at. If a reattach moved the request just as its old daemon answered,
  // this withdraws the moved copy.
  release_locked(request.at);
  return result;
}

Result ClientImpl::expire_locked(Request& request, std::chrono::milliseconds timeout) {
  const bool gone = request.at.segment->dead.load(std::memory_order_acquire);
  release_locked(request.at);
  if (gone) {
    return Result::failure(ErrorCode::kDaemonUnavailable,
                           fmt::format("no answer within {} ms: the batchd daemon at {} went away and "
                                       "no daemon came back in time", timeout.count(), socket_path_));
  }
  return Result::failure(ErrorCode::kTimeout, fmt::format("no answer within {} ms", timeout.count()));
}

DaemonStatus ClientImpl::daemon_status() const {
  std::shared_ptr<Segment> seg;  // kept mapped while it is read, even if a reattach replaces it
  {
    std::lock_guard lock(mu_);
    seg = current_;
  }
  return read_daemon_status(*seg->status, seg->status_bytes);
}

std::unique_ptr<Client> Client::connect(const ClientOptions& options, Error* error) {
  Error local;
  Error& err = error != nullptr ? *error : local;
  const std::string path = options.socket_path.empty() ? client_default_socket_path() : options.socket_path;
  shm::UniqueFd event_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!event_fd.valid()) {
    err = {ErrorCode::kDaemonUnavailable, std::string("eventfd: ") + std::strerror(errno)};
    return nullptr;
  }
  Attempt<Attachment> attachment = attach_to_daemon(path, options.connect_timeout);
  if (!attachment) {
    err = attachment.error();
    return nullptr;
  }
  Attempt<std::shared_ptr<Segment>> segment = make_segment(std::move(*attachment), 1);
  if (!segment) {
    err = segment.error();
    return nullptr;
  }
  auto impl = std::make_unique<ClientImpl>(std::move(*segment), std::move(event_fd), options, path);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result Client::submit(std::string_view input, std::chrono::milliseconds timeout, Priority priority) {
  return impl_->submit(input, timeout, RequestOptions{priority, {}});
}
Result Client::submit(std::string_view input, std::chrono::milliseconds timeout, const RequestOptions& options) {
  return impl_->submit(input, timeout, options);
}
std::vector<Result> Client::submit_many(std::span<const std::string_view> inputs,
                                        std::chrono::milliseconds timeout, Priority priority) {
  return impl_->submit_many(inputs, timeout, RequestOptions{priority, {}});
}
std::vector<Result> Client::submit_many(std::span<const std::string_view> inputs, std::chrono::milliseconds timeout,
                                        const RequestOptions& options) {
  return impl_->submit_many(inputs, timeout, options);
}
std::size_t Client::submit_many_async(std::span<AsyncSubmission> submissions,
                                      std::chrono::milliseconds timeout) {
  return impl_->submit_async_batch(submissions, timeout, false);
}
bool Client::submit_all_async(std::span<AsyncSubmission> submissions, std::chrono::milliseconds timeout) {
  return impl_->submit_async_batch(submissions, timeout, true) == submissions.size();
}
std::optional<Error> Client::submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                          Callback done, std::uint64_t* id) {
  return impl_->submit_async(input, timeout, RequestOptions{}, std::move(done), id);
}
std::optional<Error> Client::submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                          Priority priority, Callback done, std::uint64_t* id) {
  return impl_->submit_async(input, timeout, RequestOptions{priority, {}}, std::move(done), id);
}
std::optional<Error> Client::submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                          const RequestOptions& options, Callback done, std::uint64_t* id) {
  return impl_->submit_async(input, timeout, options, std::move(done), id);
}
void Client::cancel(std::uint64_t id) { impl_->cancel(std::span<const std::uint64_t>(&id, 1)); }
void Client::cancel(std::span<const std::uint64_t> ids) { impl_->cancel(ids); }
std::size_t Client::poll() { return impl_->poll(); }
int Client::event_fd() const noexcept { return impl_->event_fd(); }
std::size_t Client::poll_wait(std::chrono::microseconds max_wait) { return impl_->poll_wait(max_wait); }
bool Client::connected() const noexcept { return impl_->connected(); }
std::uint32_t Client::max_input_bytes() const noexcept { return impl_->max_input_bytes(); }
std::uint32_t Client::slot_count() const noexcept { return impl_->slot_count(); }
DaemonStatus Client::daemon_status() const { return impl_->daemon_status(); }

}  // namespace batchd


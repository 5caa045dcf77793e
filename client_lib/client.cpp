#include "client_lib/client.hpp"

#include <poll.h>
#include <simdjson.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <fmt/format.h>

#include <cstring>

#include "client_lib/attach.hpp"
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
  }
  return "unknown";
}

namespace {

// A sleeping caller re-checks the connection this often, so a daemon that vanishes is noticed
// even if the monitor's wake raced with the caller going to sleep.
constexpr std::int64_t kWaitSliceNs = 100'000'000;

Result result_from_wire(shm::WireStatus status, std::string payload) {
  switch (status) {
    case shm::WireStatus::kOk: return Result::success(std::move(payload));
    case shm::WireStatus::kTooLarge: return Result::failure(ErrorCode::kTooLarge, std::move(payload));
    case shm::WireStatus::kInvalidUtf8:
      return Result::failure(ErrorCode::kInvalidUtf8, std::move(payload));
    case shm::WireStatus::kTimeout: return Result::failure(ErrorCode::kTimeout, std::move(payload));
    case shm::WireStatus::kOverloaded:
      return Result::failure(ErrorCode::kOverloaded, std::move(payload));
    case shm::WireStatus::kBackendError:
      return Result::failure(ErrorCode::kBackendError, std::move(payload));
    case shm::WireStatus::kCancelled: return Result::failure(ErrorCode::kCancelled, std::move(payload));
    case shm::WireStatus::kBackendUnavailable:
      return Result::failure(ErrorCode::kBackendUnavailable, std::move(payload));
  }
  return Result::failure(ErrorCode::kProtocolError,
                         fmt::format("daemon wrote unknown status {}", static_cast<unsigned>(status)));
}

}  // namespace

class ClientImpl {
 public:
  ClientImpl(Attachment attachment, shm::UniqueFd event_fd, const ClientOptions& options,
             std::string socket_path);
  ~ClientImpl();

  bool validate(Error& error);
  Result submit(std::string_view input, std::chrono::milliseconds timeout);
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    Client::Callback done);
  std::size_t poll();

  [[nodiscard]] int event_fd() const noexcept { return event_fd_.get(); }
  [[nodiscard]] bool connected() const noexcept { return !daemon_gone_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept { return view_.geometry().params.max_input_bytes; }
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return view_.slot_count(); }
  [[nodiscard]] DaemonStatus daemon_status() const;

 private:
  enum class Use : std::uint8_t { kFree, kSync, kAsync, kAbandoned };
  struct SlotState {
    std::uint32_t generation = 0;
    Use use = Use::kFree;
    std::int64_t deadline_ns = 0;
    Client::Callback done;
  };

  std::optional<Error> check_input(std::string_view input) const;
  // Claims a slot, writes the request and publishes it. Returns the slot or an error.
  std::optional<Error> enqueue(std::string_view input, std::int64_t deadline_ns, Use use,
                               Client::Callback done, std::uint32_t& slot_out);
  bool reclaim_abandoned_locked() noexcept;
  [[nodiscard]] bool slot_done(std::uint32_t slot, std::uint32_t generation) const noexcept;
  Result read_result(std::uint32_t slot) const;
  void abandon(std::uint32_t slot, std::uint32_t generation);
  void ring_doorbell_if_sleeping() noexcept;
  void monitor() noexcept;
  Result gone_result() const;

  ClientOptions options_;
  std::string socket_path_;
  shm::UniqueFd connection_;
  shm::UniqueFd request_fd_, completion_fd_, doorbell_fd_, status_fd_;
  shm::UniqueFd event_fd_;
  shm::UniqueFd stop_fd_;  // tells the monitor thread to exit
  boost::interprocess::mapped_region request_map_, completion_map_, status_map_;
  shm::SegmentView view_;
  const shm::DaemonStatusPage* status_ = nullptr;

  std::mutex mu_;  // serializes the ring's producer and the slot bookkeeping below
  shm::RingProducer producer_;
  std::vector<SlotState> slots_;
  std::vector<std::uint32_t> free_;
  std::vector<std::uint32_t> abandoned_;
  std::vector<std::uint32_t> async_;

  std::vector<std::pair<Client::Callback, Result>> finished_;  // poll()'s scratch
  std::atomic<bool> daemon_gone_{false};
  std::thread monitor_;
};

ClientImpl::ClientImpl(Attachment attachment, shm::UniqueFd event_fd, const ClientOptions& options,
                       std::string socket_path)
    : options_(options), socket_path_(std::move(socket_path)),
      connection_(std::move(attachment.connection)),
      request_fd_(std::move(attachment.fds[shm::kRequestRegionFd])),
      completion_fd_(std::move(attachment.fds[shm::kCompletionRegionFd])),
      doorbell_fd_(std::move(attachment.fds[shm::kDoorbellFd])),
      status_fd_(std::move(attachment.fds[shm::kStatusPageFd])), event_fd_(std::move(event_fd)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)) {}

ClientImpl::~ClientImpl() {
  if (monitor_.joinable()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_fd_.get(), &one, sizeof(one));
    monitor_.join();
  }
}

bool ClientImpl::validate(Error& error) {
  try {
    const std::int64_t req_bytes = shm::file_bytes(request_fd_.get());
    const std::int64_t comp_bytes = shm::file_bytes(completion_fd_.get());
    const std::int64_t status_bytes = shm::file_bytes(status_fd_.get());
    if (req_bytes < static_cast<std::int64_t>(sizeof(shm::SegmentHeader)) || comp_bytes <= 0 ||
        status_bytes < static_cast<std::int64_t>(shm::kStatusPageBytes)) {
      error = {ErrorCode::kProtocolError, "daemon sent segment files too small to hold a header"};
      return false;
    }
    request_map_ = shm::map_fd(request_fd_.get(), static_cast<std::uint64_t>(req_bytes), true);
    // Read-only: the daemon sealed this region against writable mappings.
    completion_map_ = shm::map_fd(completion_fd_.get(), static_cast<std::uint64_t>(comp_bytes), false);
    status_map_ = shm::map_fd(status_fd_.get(), shm::kStatusPageBytes, false);
    shm::SegmentHeader header{};
    std::memcpy(&header, request_map_.get_address(), sizeof(header));
    shm::Geometry geometry;
    std::string why;
    if (!shm::validate_header(header, static_cast<std::uint64_t>(req_bytes),
                              static_cast<std::uint64_t>(comp_bytes), geometry, why)) {
      error = {ErrorCode::kProtocolError, "daemon's segment refused: " + why};
      return false;
    }
    view_ = shm::SegmentView(geometry, request_map_.get_address(), completion_map_.get_address());
    status_ = static_cast<const shm::DaemonStatusPage*>(status_map_.get_address());
  } catch (const std::exception& e) {
    error = {ErrorCode::kProtocolError, std::string("cannot map the daemon's segment: ") + e.what()};
    return false;
  }
  const std::uint32_t slots = view_.slot_count();
  producer_ = shm::RingProducer(view_.ring_tail(), view_.ring_entries(), view_.completion_header(), slots);
  slots_.resize(slots);
  free_.reserve(slots);
  abandoned_.reserve(slots);
  async_.reserve(slots);
  finished_.reserve(slots);
  for (std::uint32_t i = slots; i-- > 0;) free_.push_back(i);
  monitor_ = std::thread([this] { monitor(); });
  return true;
}

void ClientImpl::monitor() noexcept {
  pollfd fds[2] = {{connection_.get(), POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;
    if ((fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      char buf[64];
      const ssize_t n = ::recv(connection_.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && errno == EAGAIN)) continue;  // the daemon sends nothing today
      break;
    }
  }
  daemon_gone_.store(true, std::memory_order_seq_cst);
  // Wake every sleeper so it sees the daemon is gone (FUTEX_WAKE works on a read-only mapping).
  for (std::uint32_t i = 0; i < view_.slot_count(); ++i) {
    shm::futex_wake_all(view_.completion_slot(i)->state);
  }
  if (event_fd_.valid()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
  }
}

std::optional<Error> ClientImpl::check_input(std::string_view input) const {
  if (input.size() > max_input_bytes()) {
    return Error{ErrorCode::kTooLarge,
                 fmt::format("input of {} bytes exceeds the daemon's limit of {} bytes",
                             input.size(), max_input_bytes())};
  }
  if (!simdjson::validate_utf8(input.data(), input.size())) {
    return Error{ErrorCode::kInvalidUtf8, "input is not valid UTF-8"};
  }
  if (!connected()) return Error{ErrorCode::kDaemonUnavailable, gone_result().error().message};
  return std::nullopt;
}

Result ClientImpl::gone_result() const {
  return Result::failure(ErrorCode::kDaemonUnavailable,
                         fmt::format("the batchd daemon at {} went away", socket_path_));
}

bool ClientImpl::reclaim_abandoned_locked() noexcept {
  bool any = false;
  for (std::size_t i = 0; i < abandoned_.size();) {
    const std::uint32_t slot = abandoned_[i];
    if (slot_done(slot, slots_[slot].generation)) {
      slots_[slot].use = Use::kFree;
      free_.push_back(slot);
      abandoned_[i] = abandoned_.back();
      abandoned_.pop_back();
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

std::optional<Error> ClientImpl::enqueue(std::string_view input, std::int64_t deadline_ns, Use use,
                                         Client::Callback done, std::uint32_t& slot_out) {
  std::uint32_t slot = 0;
  {
    std::lock_guard lock(mu_);
    if (free_.empty() && !reclaim_abandoned_locked()) {
      return Error{ErrorCode::kOverloaded,
                   fmt::format("all {} request slots of this client are in flight; retry later",
                               slot_count())};
    }
    slot = free_.back();
    free_.pop_back();
    SlotState& state = slots_[slot];
    state.generation = state.generation % shm::kGenerationMask + 1;
    state.use = use;
    state.deadline_ns = deadline_ns;
    state.done = std::move(done);
    shm::RequestSlotHeader& header = *view_.request_slot(slot);
    header.input_bytes = static_cast<std::uint32_t>(input.size());
    header.deadline_mono_ns = deadline_ns;
    header.notify.store(use == Use::kAsync ? shm::kNotifyEventfd : 0U, std::memory_order_relaxed);
    std::memcpy(view_.request_input(slot), input.data(), input.size());
    if (!producer_.try_push(shm::make_ring_entry(slot, state.generation))) {
      // Cannot happen while slots == ring capacity, but a full ring must never lose a request.
      state.use = Use::kFree;
      state.done = nullptr;
      free_.push_back(slot);
      return Error{ErrorCode::kOverloaded, "the submission ring is full; retry later"};
    }
    if (use == Use::kAsync) async_.push_back(slot);
  }
  ring_doorbell_if_sleeping();
  slot_out = slot;
  return std::nullopt;
}

void ClientImpl::ring_doorbell_if_sleeping() noexcept {
  // seq_cst after the seq_cst tail store: pairs with the drain loop raising drain_sleeping and
  // then re-reading the rings, so either it sees this request or this sees it asleep.
  if (status_->drain_sleeping.load(std::memory_order_seq_cst) != 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(doorbell_fd_.get(), &one, sizeof(one));
  }
}

bool ClientImpl::slot_done(std::uint32_t slot, std::uint32_t generation) const noexcept {
  return view_.completion_slot(slot)->state.load(std::memory_order_acquire) ==
         shm::make_state(generation, shm::SlotPhase::kDone);
}

Result ClientImpl::read_result(std::uint32_t slot) const {
  const shm::CompletionSlotHeader& header = *view_.completion_slot(slot);
  const std::uint32_t bytes = header.output_bytes;
  if (bytes > view_.geometry().params.max_output_bytes) {
    return Result::failure(ErrorCode::kProtocolError,
                           fmt::format("daemon wrote an answer of {} bytes into a {}-byte slot", bytes,
                                       view_.geometry().params.max_output_bytes));
  }
  std::string payload(reinterpret_cast<const char*>(view_.completion_output(slot)), bytes);
  return result_from_wire(static_cast<shm::WireStatus>(header.status), std::move(payload));
}

void ClientImpl::abandon(std::uint32_t slot, std::uint32_t generation) {
  // Withdraws the request if the daemon has not taken it yet; either way the slot is reused only
  // after the daemon writes this generation's completion.
  view_.request_slot(slot)->cancel_generation.store(generation, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  slots_[slot].use = Use::kAbandoned;
  slots_[slot].done = nullptr;
  abandoned_.push_back(slot);
}

Result ClientImpl::submit(std::string_view input, std::chrono::milliseconds timeout) {
  if (auto bad = check_input(input)) return Result::failure(bad->code, std::move(bad->message));
  const std::int64_t deadline_ns = shm::monotonic_ns() + timeout.count() * 1'000'000;
  std::uint32_t slot = 0;
  if (auto bad = enqueue(input, deadline_ns, Use::kSync, nullptr, slot)) {
    return Result::failure(bad->code, std::move(bad->message));
  }
  const std::uint32_t generation = slots_[slot].generation;  // only this thread changes it now
  const shm::CompletionSlotHeader& completion = *view_.completion_slot(slot);
  std::atomic<std::uint32_t>& notify = view_.request_slot(slot)->notify;
  const std::uint32_t done_state = shm::make_state(generation, shm::SlotPhase::kDone);
  std::int64_t spin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.spin).count();
  bool done = false;
  for (;;) {
    const std::int64_t slice_end = std::min(deadline_ns, shm::monotonic_ns() + kWaitSliceNs);
    done = shm::wait_for_change(completion.state, notify, shm::kNotifyFutex, spin_ns, slice_end,
                                [&](std::uint32_t s) { return s == done_state; });
    spin_ns = 0;
    if (done || !connected() || shm::monotonic_ns() >= deadline_ns) break;
  }
  if (!done) {
    abandon(slot, generation);
    if (!connected()) return gone_result();
    return Result::failure(ErrorCode::kTimeout,
                           fmt::format("no answer within {} ms", timeout.count()));
  }
  Result result = read_result(slot);
  std::lock_guard lock(mu_);
  slots_[slot].use = Use::kFree;
  free_.push_back(slot);
  return result;
}

std::optional<Error> ClientImpl::submit_async(std::string_view input,
                                              std::chrono::milliseconds timeout,
                                              Client::Callback done) {
  if (auto bad = check_input(input)) return bad;
  const std::int64_t deadline_ns = shm::monotonic_ns() + timeout.count() * 1'000'000;
  std::uint32_t slot = 0;
  return enqueue(input, deadline_ns, Use::kAsync, std::move(done), slot);
}

std::size_t ClientImpl::poll() {
  std::uint64_t counter = 0;
  [[maybe_unused]] const ssize_t n = ::read(event_fd_.get(), &counter, sizeof(counter));
  const std::int64_t now_ns = shm::monotonic_ns();
  const bool gone = !connected();
  finished_.clear();
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < async_.size();) {
      const std::uint32_t slot = async_[i];
      SlotState& state = slots_[slot];
      bool finished = true;
      if (slot_done(slot, state.generation)) {
        finished_.emplace_back(std::move(state.done), read_result(slot));
        state.use = Use::kFree;
        free_.push_back(slot);
      } else if (gone || now_ns >= state.deadline_ns) {
        finished_.emplace_back(std::move(state.done),
                               gone ? gone_result()
                                    : Result::failure(ErrorCode::kTimeout, "no answer before the deadline"));
        view_.request_slot(slot)->cancel_generation.store(state.generation, std::memory_order_relaxed);
        state.use = Use::kAbandoned;
        abandoned_.push_back(slot);
      } else {
        finished = false;
      }
      if (finished) {
        async_[i] = async_.back();
        async_.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (auto& [callback, result] : finished_) {
    if (callback) callback(std::move(result));
  }
  const std::size_t count = finished_.size();
  finished_.clear();
  return count;
}

DaemonStatus ClientImpl::daemon_status() const {
  static constexpr const char* kStates[] = {"healthy", "unhealthy", "probing"};
  const shm::DaemonStatusPage& page = *status_;
  DaemonStatus out;
  char backend[sizeof(page.backend) + 1] = {};
  std::memcpy(backend, page.backend, sizeof(page.backend));
  out.backend = backend;
  out.daemon_pid = page.daemon_pid;
  out.age_ns = shm::monotonic_ns() - page.published_ns.load(std::memory_order_acquire);
  out.healthy_devices = page.healthy_devices.load(std::memory_order_relaxed);
  out.clients = page.clients.load(std::memory_order_relaxed);
  out.requests_taken = page.requests_taken.load(std::memory_order_relaxed);
  out.requests_ok = page.requests_ok.load(std::memory_order_relaxed);
  out.requests_failed = page.requests_failed.load(std::memory_order_relaxed);
  out.requests_rejected = page.requests_rejected.load(std::memory_order_relaxed);
  out.in_flight = page.in_flight.load(std::memory_order_relaxed);
  out.batches = page.batches.load(std::memory_order_relaxed);
  out.batch_failures = page.batch_failures.load(std::memory_order_relaxed);
  for (const auto& bucket : page.batch_sizes) out.batch_sizes.push_back(bucket.load(std::memory_order_relaxed));
  const std::size_t listed = std::min<std::size_t>(page.devices.load(std::memory_order_relaxed), shm::kStatusDevices);
  for (std::size_t d = 0; d < listed; ++d) {
    const shm::StatusDevice& dev = page.device[d];
    const std::uint32_t state = dev.state.load(std::memory_order_relaxed);
    out.devices.push_back({state < 3 ? kStates[state] : "unknown", dev.batches_ok.load(std::memory_order_relaxed),
                           dev.batches_failed.load(std::memory_order_relaxed),
                           dev.timeouts.load(std::memory_order_relaxed),
                           dev.outstanding_requests.load(std::memory_order_relaxed),
                           dev.batch_ns.load(std::memory_order_relaxed)});
  }
  return out;
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
  Attachment attachment;
  if (!attach_to_daemon(path, options.connect_timeout, event_fd.get(), attachment, err)) return nullptr;
  auto impl = std::make_unique<ClientImpl>(std::move(attachment), std::move(event_fd), options, path);
  if (!impl->validate(err)) return nullptr;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result Client::submit(std::string_view input, std::chrono::milliseconds timeout) {
  return impl_->submit(input, timeout);
}
std::optional<Error> Client::submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                          Callback done) {
  return impl_->submit_async(input, timeout, std::move(done));
}
std::size_t Client::poll() { return impl_->poll(); }
int Client::event_fd() const noexcept { return impl_->event_fd(); }
bool Client::connected() const noexcept { return impl_->connected(); }
std::uint32_t Client::max_input_bytes() const noexcept { return impl_->max_input_bytes(); }
std::uint32_t Client::slot_count() const noexcept { return impl_->slot_count(); }
DaemonStatus Client::daemon_status() const { return impl_->daemon_status(); }

}  // namespace batchd

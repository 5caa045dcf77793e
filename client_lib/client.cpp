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

// A sleeping caller re-checks its request this often, so a daemon that vanishes is noticed even
// if the monitor's wake raced with the caller going to sleep.
constexpr std::int64_t kWaitSliceNs = 100'000'000;
// While no daemon is attached a sync caller also looks at its old slot this often: a daemon that
// stops cleanly may still answer there after it closed the connection.
constexpr std::int64_t kDetachedPollNs = 10'000'000;
// Each reattach try waits this long for a daemon, then the monitor rests kReattachRestMs (and
// checks for shutdown) before the next try.
constexpr auto kReattachTry = std::chrono::milliseconds(100);
constexpr int kReattachRestMs = 20;

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

void signal_eventfd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
}

enum class Use : std::uint8_t { kFree, kSync, kAsync, kAbandoned };

struct Request;

// The client's bookkeeping for one slot of one segment.
struct SlotState {
  std::uint32_t generation = 0;
  Use use = Use::kFree;
  bool pushed = false;          // published through the ring (a daemon may hold it)
  Request* waiter = nullptr;    // the sync caller's request, so a reattach can move it
};

// Everything that belongs to one attachment to one daemon. A client holds the current one and
// keeps a replaced one alive while a request still reads an answer from it.
struct Segment {
  std::uint64_t epoch = 0;  // 1 for the first attachment, +1 per reattach
  shm::UniqueFd connection, request_fd, completion_fd, doorbell_fd, status_fd;
  boost::interprocess::mapped_region request_map, completion_map, status_map;
  shm::SegmentView view;
  const shm::DaemonStatusPage* status = nullptr;
  // Set by the monitor once the daemon's connection closed; never cleared.
  std::atomic<bool> dead{false};

  // Guarded by ClientImpl::mu_.
  shm::RingProducer producer;
  std::vector<SlotState> slots;
  std::vector<std::uint32_t> free, abandoned;

  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept {
    return view.geometry().params.max_input_bytes;
  }
  [[nodiscard]] bool slot_done(std::uint32_t slot, std::uint32_t generation) const noexcept {
    return view.completion_slot(slot)->state.load(std::memory_order_acquire) ==
           shm::make_state(generation, shm::SlotPhase::kDone);
  }
  [[nodiscard]] Result read_result(std::uint32_t slot) const;
  void ring_doorbell_if_sleeping() const noexcept;
  [[nodiscard]] bool reclaim_abandoned() noexcept;
};

// Where a request lives now. The monitor rewrites it (under the client's mutex) when it moves
// the request to a new daemon's segment.
struct Location {
  std::shared_ptr<Segment> segment;
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
};

// One submitted request: on a sync caller's stack, or in the client's async list.
struct Request {
  Location at;
  std::int64_t deadline_ns = 0;
  std::optional<Error> failure;  // set when a reattach could not move it
};

struct AsyncRequest : Request {
  Client::Callback done;
  std::uint64_t id = 0;  // for cancel()
};

Result Segment::read_result(std::uint32_t slot) const {
  const shm::CompletionSlotHeader& header = *view.completion_slot(slot);
  const std::uint32_t bytes = header.output_bytes;
  if (bytes > view.geometry().params.max_output_bytes) {
    return Result::failure(ErrorCode::kProtocolError,
                           fmt::format("daemon wrote an answer of {} bytes into a {}-byte slot", bytes,
                                       view.geometry().params.max_output_bytes));
  }
  std::string payload(reinterpret_cast<const char*>(view.completion_output(slot)), bytes);
  return result_from_wire(static_cast<shm::WireStatus>(header.status), std::move(payload));
}

void Segment::ring_doorbell_if_sleeping() const noexcept {
  // seq_cst after the seq_cst tail store: pairs with the drain loop raising drain_sleeping and
  // then re-reading the rings, so either it sees this request or this sees it asleep.
  if (status->drain_sleeping.load(std::memory_order_seq_cst) != 0) signal_eventfd(doorbell_fd.get());
}

bool Segment::reclaim_abandoned() noexcept {
  bool any = false;
  for (std::size_t i = 0; i < abandoned.size();) {
    const std::uint32_t slot = abandoned[i];
    if (slot_done(slot, slots[slot].generation)) {
      slots[slot].use = Use::kFree;
      free.push_back(slot);
      abandoned[i] = abandoned.back();
      abandoned.pop_back();
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

// Maps the regions of a fresh attachment and checks the daemon's header.
bool map_segment(Segment& seg, Error& error) {
  const std::int64_t req_bytes = shm::file_bytes(seg.request_fd.get());
  const std::int64_t comp_bytes = shm::file_bytes(seg.completion_fd.get());
  const std::int64_t status_bytes = shm::file_bytes(seg.status_fd.get());
  if (req_bytes < static_cast<std::int64_t>(sizeof(shm::SegmentHeader)) || comp_bytes <= 0 ||
      status_bytes < static_cast<std::int64_t>(shm::kStatusPageBytes)) {
    error = {ErrorCode::kProtocolError, "daemon sent segment files too small to hold a header"};
    return false;
  }
  seg.request_map = shm::map_fd(seg.request_fd.get(), static_cast<std::uint64_t>(req_bytes), true);
  // Read-only: the daemon sealed this region against writable mappings.
  seg.completion_map = shm::map_fd(seg.completion_fd.get(), static_cast<std::uint64_t>(comp_bytes), false);
  seg.status_map = shm::map_fd(seg.status_fd.get(), shm::kStatusPageBytes, false);
  shm::SegmentHeader header{};
  std::memcpy(&header, seg.request_map.get_address(), sizeof(header));
  shm::Geometry geometry;
  std::string why;
  if (!shm::validate_header(header, static_cast<std::uint64_t>(req_bytes),
                            static_cast<std::uint64_t>(comp_bytes), geometry, why)) {
    error = {ErrorCode::kProtocolError, "daemon's segment refused: " + why};
    return false;
  }
  seg.view = shm::SegmentView(geometry, seg.request_map.get_address(), seg.completion_map.get_address());
  seg.status = static_cast<const shm::DaemonStatusPage*>(seg.status_map.get_address());
  return true;
}

// Builds the Segment of a fresh attachment, or returns nullptr and says why in `error`.
std::shared_ptr<Segment> make_segment(Attachment attachment, std::uint64_t epoch, Error& error) {
  try {
    auto seg = std::make_shared<Segment>();
    seg->epoch = epoch;
    seg->connection = std::move(attachment.connection);
    seg->request_fd = std::move(attachment.fds[shm::kRequestRegionFd]);
    seg->completion_fd = std::move(attachment.fds[shm::kCompletionRegionFd]);
    seg->doorbell_fd = std::move(attachment.fds[shm::kDoorbellFd]);
    seg->status_fd = std::move(attachment.fds[shm::kStatusPageFd]);
    if (!map_segment(*seg, error)) return nullptr;
    const std::uint32_t slots = seg->view.slot_count();
    seg->producer = shm::RingProducer(seg->view.ring_tail(), seg->view.ring_entries(),
                                      seg->view.completion_header(), slots);
    seg->slots.resize(slots);
    seg->free.reserve(slots);
    seg->abandoned.reserve(slots);
    for (std::uint32_t i = slots; i-- > 0;) seg->free.push_back(i);
    return seg;
  } catch (const std::exception& e) {
    error = {ErrorCode::kProtocolError, std::string("cannot map the daemon's segment: ") + e.what()};
    return nullptr;
  }
}

}  // namespace

class ClientImpl {
 public:
  ClientImpl(std::shared_ptr<Segment> segment, shm::UniqueFd event_fd, const ClientOptions& options,
             std::string socket_path);
  ~ClientImpl();

  Result submit(std::string_view input, std::chrono::milliseconds timeout);
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    Client::Callback done, std::uint64_t* id);
  void cancel(std::uint64_t id);
  std::size_t poll();

  [[nodiscard]] int event_fd() const noexcept { return event_fd_.get(); }
  [[nodiscard]] bool connected() const noexcept { return attached_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept {
    return max_input_bytes_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return slot_count_.load(std::memory_order_relaxed); }
  [[nodiscard]] DaemonStatus daemon_status() const;

 private:
  std::optional<Error> check_input(std::string_view input) const;
  // Claims a slot in the current segment, writes the request and, while a daemon is attached,
  // publishes it. Fills `request.at`.
  std::optional<Error> enqueue_locked(std::string_view input, Use use, Request& request);
  std::uint32_t write_slot_locked(Segment& seg, std::uint32_t slot, const void* input,
                                  std::uint32_t bytes, std::int64_t deadline_ns, Use use) noexcept;
  bool publish_locked(Segment& seg, std::uint32_t slot) noexcept;
  // Gives the slot a request holds back: free at once if no daemon can still write it, else
  // withdrawn and reused once the daemon answers it.
  void release_locked(const Location& at) noexcept;
  Result wait_sync(Request& request, std::chrono::milliseconds timeout);
  Result finish_sync(Request& request, const Location& at);
  Result expire_locked(Request& request, std::chrono::milliseconds timeout);
  std::optional<Result> settle_locked(AsyncRequest& request, std::int64_t now_ns);

  void monitor() noexcept;
  bool wait_for_hangup(int connection) noexcept;
  void mark_gone(Segment& seg) noexcept;
  std::shared_ptr<Segment> reattach() noexcept;
  void install(std::shared_ptr<Segment> fresh) noexcept;
  void move_requests_locked(Segment& old, const std::shared_ptr<Segment>& fresh) noexcept;
  void move_one_locked(Request& request, Use use, const std::shared_ptr<Segment>& fresh) noexcept;

  ClientOptions options_;
  std::string socket_path_;
  shm::UniqueFd event_fd_;
  shm::UniqueFd stop_fd_;  // tells the monitor thread to exit

  mutable std::mutex mu_;  // serializes the rings' producers and all the bookkeeping below
  std::shared_ptr<Segment> current_;
  std::vector<AsyncRequest> async_;
  std::uint64_t next_async_id_ = 0;  // guarded by mu_
  std::uint64_t epoch_ = 1;  // the monitor's alone

  std::vector<std::pair<Client::Callback, Result>> finished_;  // poll()'s scratch
  std::atomic<bool> attached_{true};
  std::atomic<std::uint32_t> max_input_bytes_{0}, slot_count_{0};
  // Bumped (under mu_) by every reattach; a process-local futex word that callers whose daemon
  // is gone sleep on.
  std::atomic<std::uint32_t> reattach_seq_{0};
  std::thread monitor_;
};

ClientImpl::ClientImpl(std::shared_ptr<Segment> segment, shm::UniqueFd event_fd,
                       const ClientOptions& options, std::string socket_path)
    : options_(options), socket_path_(std::move(socket_path)), event_fd_(std::move(event_fd)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)), current_(std::move(segment)) {
  max_input_bytes_.store(current_->max_input_bytes(), std::memory_order_relaxed);
  slot_count_.store(current_->view.slot_count(), std::memory_order_relaxed);
  async_.reserve(current_->view.slot_count());
  finished_.reserve(current_->view.slot_count());
  monitor_ = std::thread([this] { monitor(); });
}

ClientImpl::~ClientImpl() {
  if (monitor_.joinable()) {
    signal_eventfd(stop_fd_.get());
    monitor_.join();
  }
}

// ---- the monitor: notices the daemon's death and re-attaches -------------------------------

void ClientImpl::monitor() noexcept {
  for (;;) {
    std::shared_ptr<Segment> seg;
    {
      std::lock_guard lock(mu_);
      seg = current_;
    }
    if (!wait_for_hangup(seg->connection.get())) return;
    mark_gone(*seg);
    std::shared_ptr<Segment> fresh = reattach();
    if (!fresh) return;
    install(std::move(fresh));
  }
}

// Returns true when the daemon's connection closed, false when the client is shutting down.
bool ClientImpl::wait_for_hangup(int connection) noexcept {
  pollfd fds[2] = {{connection, POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;
    if ((fds[1].revents & POLLIN) != 0) return false;
    if ((fds[0].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      char buf[64];
      const ssize_t n = ::recv(connection, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && errno == EAGAIN)) continue;  // the daemon sends nothing today
      return true;
    }
  }
}

void ClientImpl::mark_gone(Segment& seg) noexcept {
  attached_.store(false, std::memory_order_release);
  seg.dead.store(true, std::memory_order_seq_cst);
  // Wake every sleeper so it sees the daemon is gone and waits for the reattach instead
  // (FUTEX_WAKE works on a read-only mapping).
  for (std::uint32_t i = 0; i < seg.view.slot_count(); ++i) {
    shm::futex_wake_all(seg.view.completion_slot(i)->state);
  }
  if (event_fd_.valid()) signal_eventfd(event_fd_.get());
}

// Tries to attach to a (new) daemon until one answers; nullptr when the client shuts down.
std::shared_ptr<Segment> ClientImpl::reattach() noexcept {
  for (;;) {
    Attachment attachment;
    Error error;
    if (attach_to_daemon(socket_path_, kReattachTry, event_fd_.get(), attachment, error)) {
      if (auto fresh = make_segment(std::move(attachment), epoch_ + 1, error)) {
        ++epoch_;
        return fresh;
      }
    }
    pollfd stop{stop_fd_.get(), POLLIN, 0};
    if (::poll(&stop, 1, kReattachRestMs) > 0) return nullptr;
  }
}

void ClientImpl::install(std::shared_ptr<Segment> fresh) noexcept {
  std::shared_ptr<Segment> old;
  {
    std::lock_guard lock(mu_);
    old = std::exchange(current_, fresh);
    move_requests_locked(*old, fresh);
    max_input_bytes_.store(fresh->max_input_bytes(), std::memory_order_relaxed);
    slot_count_.store(fresh->view.slot_count(), std::memory_order_relaxed);
    attached_.store(true, std::memory_order_release);
    reattach_seq_.fetch_add(1, std::memory_order_seq_cst);
    fresh->ring_doorbell_if_sleeping();
  }
  shm::futex_wake_all(reattach_seq_);
  // A caller that checked its old slot just before the segment died may sleep there still.
  for (std::uint32_t i = 0; i < old->view.slot_count(); ++i) {
    shm::futex_wake_all(old->view.completion_slot(i)->state);
  }
  if (event_fd_.valid()) signal_eventfd(event_fd_.get());
}

// Moves every request of the dead segment that is neither answered nor past its deadline into
// the fresh one. Answered ones stay where their caller reads them (the caller's Location keeps
// the old segment mapped); expired ones are left for their caller to time out; abandoned slots
// are dropped with the old segment.
void ClientImpl::move_requests_locked(Segment& old, const std::shared_ptr<Segment>& fresh) noexcept {
  const std::int64_t now_ns = shm::monotonic_ns();
  for (std::uint32_t slot = 0; slot < old.slots.size(); ++slot) {
    SlotState& state = old.slots[slot];
    Request* waiter = state.waiter;
    if (state.use != Use::kSync || waiter == nullptr || old.slot_done(slot, state.generation) ||
        waiter->deadline_ns <= now_ns) {
      continue;
    }
    move_one_locked(*waiter, Use::kSync, fresh);
  }
  for (AsyncRequest& request : async_) {
    const Location& at = request.at;
    if (at.segment.get() != &old || request.failure || old.slot_done(at.slot, at.generation) ||
        request.deadline_ns <= now_ns) {
      continue;
    }
    move_one_locked(request, Use::kAsync, fresh);
  }
}

void ClientImpl::move_one_locked(Request& request, Use use, const std::shared_ptr<Segment>& fresh) noexcept {
  Segment& old = *request.at.segment;
  SlotState& old_state = old.slots[request.at.slot];
  old_state.use = Use::kFree;  // the old segment is never written again
  old_state.waiter = nullptr;
  const shm::RequestSlotHeader& header = *old.view.request_slot(request.at.slot);
  const std::uint32_t bytes = header.input_bytes;  // written by this process
  if (bytes > fresh->max_input_bytes()) {
    request.failure = Error{ErrorCode::kTooLarge,
                            fmt::format("the restarted daemon's input limit of {} bytes is below this "
                                        "input's {} bytes", fresh->max_input_bytes(), bytes)};
    return;
  }
  if (fresh->free.empty()) {
    request.failure = Error{ErrorCode::kOverloaded,
                            fmt::format("the restarted daemon gives this client only {} request slots, "
                                        "fewer than were in flight", fresh->view.slot_count())};
    return;
  }
  const std::uint32_t slot = fresh->free.back();
  fresh->free.pop_back();
  const std::uint32_t generation =
      write_slot_locked(*fresh, slot, old.view.request_input(request.at.slot), bytes, request.deadline_ns, use);
  if (use == Use::kSync) fresh->slots[slot].waiter = &request;
  // The fresh ring is empty and as large as its slot table, so this push cannot fail.
  (void)publish_locked(*fresh, slot);
  request.at = Location{fresh, slot, generation};
}

// ---- submitting ----------------------------------------------------------------------------

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

std::uint32_t ClientImpl::write_slot_locked(Segment& seg, std::uint32_t slot, const void* input,
                                            std::uint32_t bytes, std::int64_t deadline_ns,
                                            Use use) noexcept {
  SlotState& state = seg.slots[slot];
  state.generation = state.generation % shm::kGenerationMask + 1;
  state.use = use;
  state.pushed = false;
  state.waiter = nullptr;
  shm::RequestSlotHeader& header = *seg.view.request_slot(slot);
  header.input_bytes = bytes;
  header.deadline_mono_ns = deadline_ns;
  header.notify.store(use == Use::kAsync ? shm::kNotifyEventfd : 0U, std::memory_order_relaxed);
  if (bytes > 0) std::memcpy(seg.view.request_input(slot), input, bytes);
  return state.generation;
}

// Publishes a written slot, unless the segment's daemon is gone: then the request waits in its
// slot for the reattach to move it. False only when the ring is full.
bool ClientImpl::publish_locked(Segment& seg, std::uint32_t slot) noexcept {
  if (seg.dead.load(std::memory_order_acquire)) return true;
  if (!seg.producer.try_push(shm::make_ring_entry(slot, seg.slots[slot].generation))) return false;
  seg.slots[slot].pushed = true;
  seg.ring_doorbell_if_sleeping();
  return true;
}

std::optional<Error> ClientImpl::enqueue_locked(std::string_view input, Use use, Request& request) {
  Segment& seg = *current_;
  if (seg.free.empty() && !seg.reclaim_abandoned()) {
    return Error{ErrorCode::kOverloaded,
                 fmt::format("all {} request slots of this client are in flight; retry later",
                             seg.view.slot_count())};
  }
  const std::uint32_t slot = seg.free.back();
  seg.free.pop_back();
  const std::uint32_t generation = write_slot_locked(
      seg, slot, input.data(), static_cast<std::uint32_t>(input.size()), request.deadline_ns, use);
  if (!publish_locked(seg, slot)) {
    // Cannot happen while slots == ring capacity, but a full ring must never lose a request.
    seg.slots[slot].use = Use::kFree;
    seg.free.push_back(slot);
    return Error{ErrorCode::kOverloaded, "the submission ring is full; retry later"};
  }
  request.at = Location{current_, slot, generation};
  if (use == Use::kSync) seg.slots[slot].waiter = &request;
  return std::nullopt;
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

Result ClientImpl::submit(std::string_view input, std::chrono::milliseconds timeout) {
  if (auto bad = check_input(input)) return Result::failure(bad->code, std::move(bad->message));
  Request request;
  request.deadline_ns = shm::monotonic_ns() + timeout.count() * 1'000'000;
  {
    std::lock_guard lock(mu_);
    if (auto bad = enqueue_locked(input, Use::kSync, request)) {
      return Result::failure(bad->code, std::move(bad->message));
    }
  }
  return wait_sync(request, timeout);
}

// Waits for the request wherever it lives: in its segment's slot while that daemon is alive, or
// for the next reattach (which moves it) while none is attached.
Result ClientImpl::wait_sync(Request& request, std::chrono::milliseconds timeout) {
  std::int64_t spin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.spin).count();
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
    if (seg.slot_done(at.slot, at.generation)) return finish_sync(request, at);
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
    (void)shm::wait_for_change(seg.view.completion_slot(at.slot)->state,
                               seg.view.request_slot(at.slot)->notify, shm::kNotifyFutex, spin_ns,
                               slice_end, [&](std::uint32_t s) {
                                 return s == done_state || seg.dead.load(std::memory_order_seq_cst);
                               });
    spin_ns = 0;
  }
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

std::optional<Error> ClientImpl::submit_async(std::string_view input,
                                              std::chrono::milliseconds timeout,
                                              Client::Callback done, std::uint64_t* id) {
  if (auto bad = check_input(input)) return bad;
  AsyncRequest request;
  request.deadline_ns = shm::monotonic_ns() + timeout.count() * 1'000'000;
  request.done = std::move(done);
  std::lock_guard lock(mu_);
  if (auto bad = enqueue_locked(input, Use::kAsync, request)) return bad;
  request.id = ++next_async_id_;
  if (id != nullptr) *id = request.id;
  async_.push_back(std::move(request));
  return std::nullopt;
}

void ClientImpl::cancel(std::uint64_t id) {
  {
    std::lock_guard lock(mu_);
    for (AsyncRequest& request : async_) {
      if (request.id != id) continue;
      // Settled by the next poll(), which releases the slot and so withdraws the request from
      // the daemon if it has not taken it yet.
      if (!request.failure) request.failure = Error{ErrorCode::kCancelled, "withdrawn by the caller"};
      break;
    }
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
}

// Settles an async request if it is answered, failed or past its deadline.
std::optional<Result> ClientImpl::settle_locked(AsyncRequest& request, std::int64_t now_ns) {
  const Location& at = request.at;
  std::optional<Result> result;
  if (request.failure) {
    result = Result::failure(request.failure->code, std::move(request.failure->message));
  } else if (at.segment->slot_done(at.slot, at.generation)) {
    result = at.segment->read_result(at.slot);
  } else if (now_ns >= request.deadline_ns) {
    result = at.segment->dead.load(std::memory_order_acquire)
                 ? Result::failure(ErrorCode::kDaemonUnavailable,
                                   fmt::format("no answer before the deadline: the batchd daemon at {} "
                                               "went away and no daemon came back in time", socket_path_))
                 : Result::failure(ErrorCode::kTimeout, "no answer before the deadline");
  } else {
    return std::nullopt;
  }
  release_locked(at);
  return result;
}

std::size_t ClientImpl::poll() {
  std::uint64_t counter = 0;
  [[maybe_unused]] const ssize_t n = ::read(event_fd_.get(), &counter, sizeof(counter));
  const std::int64_t now_ns = shm::monotonic_ns();
  finished_.clear();
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < async_.size();) {
      std::optional<Result> result = settle_locked(async_[i], now_ns);
      if (!result) {
        ++i;
        continue;
      }
      finished_.emplace_back(std::move(async_[i].done), std::move(*result));
      if (i + 1 != async_.size()) async_[i] = std::move(async_.back());
      async_.pop_back();
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
  std::shared_ptr<Segment> seg;  // kept mapped while it is read, even if a reattach replaces it
  {
    std::lock_guard lock(mu_);
    seg = current_;
  }
  const shm::DaemonStatusPage& page = *seg->status;
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
  std::shared_ptr<Segment> segment = make_segment(std::move(attachment), 1, err);
  if (!segment) return nullptr;
  auto impl = std::make_unique<ClientImpl>(std::move(segment), std::move(event_fd), options, path);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result Client::submit(std::string_view input, std::chrono::milliseconds timeout) {
  return impl_->submit(input, timeout);
}
std::optional<Error> Client::submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                          Callback done, std::uint64_t* id) {
  return impl_->submit_async(input, timeout, std::move(done), id);
}
void Client::cancel(std::uint64_t id) { impl_->cancel(id); }
std::size_t Client::poll() { return impl_->poll(); }
int Client::event_fd() const noexcept { return impl_->event_fd(); }
bool Client::connected() const noexcept { return impl_->connected(); }
std::uint32_t Client::max_input_bytes() const noexcept { return impl_->max_input_bytes(); }
std::uint32_t Client::slot_count() const noexcept { return impl_->slot_count(); }
DaemonStatus Client::daemon_status() const { return impl_->daemon_status(); }

}  // namespace batchd

#include "daemon/daemon.hpp"

#include <poll.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "daemon/fd_limit.hpp"
#include "daemon/io_ops.hpp"
#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;
using io_ops::op_of;
using io_ops::id_of;

namespace {

constexpr unsigned kRingEntries = 512;
// Requests taken from one client before moving to the next, so one busy client cannot starve
// the others within a drain pass.
constexpr unsigned kBurstPerClient = 32;
constexpr std::int64_t kStopGraceNs = 5'000'000'000;
constexpr std::int64_t kStopPollNs = 1'000'000;
// A safety net only: a worker that frees a batch rings the doorbell when the drain loop sleeps.
constexpr std::int64_t kPoolPollNs = 1'000'000;

std::int64_t to_ns(WaitOrFullBatcher::TimePoint t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
WaitOrFullBatcher::TimePoint from_ns(std::int64_t ns) noexcept {
  return WaitOrFullBatcher::TimePoint(std::chrono::nanoseconds(ns));
}

}  // namespace

Daemon::Daemon(DaemonConfig config, std::unique_ptr<Backend> backend)
    : config_(std::move(config)), backend_(std::move(backend)), batcher_(config_.batch) {
  if (config_.socket_path.empty()) config_.socket_path = default_socket_path();
}

Daemon::~Daemon() {
  if (router_) {
    if (open_ != nullptr) router_->release(open_);
    router_->stop();
  }
  if (ring_ready_) io_uring_queue_exit(&ring_);
}

void Daemon::start() {
  if (auto bad = shm::check_params(config_.segment); !bad.empty()) {
    throw std::invalid_argument("bad segment parameters: " + bad);
  }
  if (config_.batch.max_batch == 0) throw std::invalid_argument("max batch must be at least 1");
  if (config_.batch.max_batch_bytes > kMaxBatchBytes) {
    // Backends address a batch's inputs with 32-bit offsets.
    throw std::invalid_argument("--max-batch-bytes (" + std::to_string(config_.batch.max_batch_bytes) +
                                ") must not exceed " + std::to_string(kMaxBatchBytes));
  }
  if (config_.segment.max_input_bytes > config_.batch.max_batch_bytes) {
    // A batch holds at least one input, and backends size their buffers by the byte budget.
    throw std::invalid_argument("--max-input-bytes (" + std::to_string(config_.segment.max_input_bytes) +
                                ") must not exceed --max-batch-bytes (" +
                                std::to_string(config_.batch.max_batch_bytes) + ")");
  }
  // steady_clock is CLOCK_MONOTONIC on Linux: the clock of every deadline in shared memory.
  static_assert(std::chrono::steady_clock::is_steady);
  if (!doorbell_reads_never_block()) {
    throw std::runtime_error("this kernel cannot read an eventfd with RWF_NOWAIT (Linux 5.12 or "
                             "later is needed): a client could block the daemon through its doorbell");
  }
  const std::uint64_t fd_limit = raise_fd_limit();
  if (const std::uint64_t needed = fds_needed(config_.max_clients, kMaxAttaching); fd_limit < needed) {
    throw std::invalid_argument(
        "--max-clients " + std::to_string(config_.max_clients) + " needs about " +
        std::to_string(needed) + " open files, but the limit is " + std::to_string(fd_limit) +
        " (raise it with ulimit -n or LimitNOFILE=, or lower --max-clients)");
  }

  const int rc = io_uring_queue_init(kRingEntries, &ring_, 0);
  if (rc < 0) {
    throw std::runtime_error(std::string("io_uring is not available: ") + std::strerror(-rc));
  }
  ring_ready_ = true;

  doorbell_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!doorbell_.valid()) throw std::system_error(errno, std::generic_category(), "eventfd");
  status_fd_ = shm::create_memfd("batchd-status", shm::kStatusPageBytes);
  status_map_ = shm::map_fd(status_fd_.get(), shm::kStatusPageBytes, true);
  shm::seal_memfd(status_fd_.get(), true);
  status_ = new (status_map_.get_address()) shm::DaemonStatusPage{};
  status_->magic = shm::kStatusMagic;
  status_->daemon_pid = static_cast<std::uint32_t>(::getpid());
  std::snprintf(status_->backend, sizeof(status_->backend), "%.*s",
                static_cast<int>(backend_->name().size()), backend_->name().data());

  control_ = std::make_unique<ControlSocket>(config_.socket_path);
  router_ = std::make_unique<Router>(
      *backend_, completer_, config_.routing,
      [this] {
        // After the batch's seq_cst return to the pool (Router::release).
        if (status_->drain_sleeping.load(std::memory_order_seq_cst) != 0) ring_doorbell();
      },
      [this] { publish_status(); });
  publish_policy();
  publish_status();
  router_->start();
  arm_poll(control_->fd(), pack(Op::kListen, 0));
  arm_doorbell_read();
  spdlog::info("batchd listening on {} (backend {}: {} devices x {} streams; max batch {}, max "
               "wait {} us, max batch bytes {})",
               config_.socket_path, backend_->name(), backend_->devices(),
               backend_->streams_per_device(), config_.batch.max_batch,
               std::chrono::duration_cast<std::chrono::microseconds>(config_.batch.max_wait).count(),
               config_.batch.max_batch_bytes);
}

void Daemon::publish_status() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  shm::DaemonStatusPage& page = *status_;
  const auto& devices = router_->devices();
  std::uint32_t healthy = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const DeviceHealth& h = *devices[d];
    if (h.state() != DeviceState::kUnhealthy) ++healthy;
    if (d >= shm::kStatusDevices) continue;
    shm::StatusDevice& out = page.device[d];
    out.state.store(static_cast<std::uint32_t>(h.state()), relaxed);
    out.batches_ok.store(h.batches_ok(), relaxed);
    out.batches_failed.store(h.batches_failed(), relaxed);
    out.timeouts.store(h.timeouts(), relaxed);
    out.outstanding_requests.store(h.outstanding_items.load(relaxed), relaxed);
    out.batch_ns.store(h.batch_ns_estimate(shm::monotonic_ns()), relaxed);
  }
  page.devices.store(static_cast<std::uint32_t>(devices.size()), relaxed);
  page.healthy_devices.store(healthy, relaxed);
  page.clients.store(stats_.clients_attached.load(relaxed) - stats_.clients_detached.load(relaxed), relaxed);
  page.requests_taken.store(stats_.requests_taken.load(relaxed), relaxed);
  page.requests_ok.store(stats_.requests_ok.load(relaxed), relaxed);
  page.requests_failed.store(stats_.requests_failed.load(relaxed), relaxed);
  page.requests_rejected.store(stats_.requests_rejected.load(relaxed), relaxed);
  page.in_flight.store(stats_.in_flight(), relaxed);
  page.batches.store(stats_.batches.load(relaxed), relaxed);
  page.batch_failures.store(stats_.batch_failures.load(relaxed), relaxed);
  page.requests_abandoned.store(stats_.requests_abandoned.load(relaxed), relaxed);
  for (std::size_t b = 0; b < shm::kBatchSizeBuckets; ++b) {
    page.batch_sizes[b].store(stats_.batch_sizes[b].load(relaxed), relaxed);
  }
  page.published_ns.store(shm::monotonic_ns(), std::memory_order_release);
}

void Daemon::publish_policy() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  status_->max_batch.store(static_cast<std::uint32_t>(config_.batch.max_batch), relaxed);
  status_->max_wait_ns.store(config_.batch.max_wait.count(), relaxed);
  status_->max_batch_bytes.store(config_.batch.max_batch_bytes, relaxed);
}

void Daemon::update_limits(const BatchLimits& limits) {
  {
    std::lock_guard lock(limits_mu_);
    pending_limits_ = limits;
  }
  limits_changed_.store(true, std::memory_order_release);
  ring_doorbell();
}

void Daemon::apply_pending_limits() {
  if (!limits_changed_.exchange(false, std::memory_order_acq_rel)) return;
  std::lock_guard lock(limits_mu_);
  config_.batch = pending_limits_;
  batcher_.set_limits(pending_limits_);
  publish_policy();
}

void Daemon::set_watchdog(std::chrono::nanoseconds interval, std::function<void()> ping) {
  watchdog_interval_ns_ = std::max<std::int64_t>(interval.count(), 1'000'000);
  watchdog_ping_ = std::move(ping);
}

void Daemon::ping_watchdog_if_due(std::int64_t now_ns) {
  if (watchdog_interval_ns_ == 0 || now_ns < next_watchdog_ns_) return;
  watchdog_ping_();
  next_watchdog_ns_ = now_ns + watchdog_interval_ns_;
}

void Daemon::request_stop() noexcept {
  stop_requested_.store(true, std::memory_order_relaxed);
  ring_doorbell();
}

void Daemon::ring_doorbell() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(doorbell_.get(), &one, sizeof(one));
}

io_uring_sqe* Daemon::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {  // the submission queue is full: flush it to make room
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void Daemon::arm_poll(int fd, std::uint64_t user_data) {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
  io_uring_sqe_set_data64(sqe, user_data);
}

void Daemon::arm_doorbell_read() {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_read(sqe, doorbell_.get(), &doorbell_value_, sizeof(doorbell_value_), 0);
  io_uring_sqe_set_data64(sqe, pack(Op::kDoorbell, 0));
}

void Daemon::handle_completions() {
  io_uring_cqe* cqes[64];
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
    if (n == 0) break;
    for (unsigned i = 0; i < n; ++i) {
      const std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
      const int res = cqes[i]->res;
      io_uring_cqe_seen(&ring_, cqes[i]);
      handle_event(data, res);
    }
  }
  if (io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
}

void Daemon::handle_event(std::uint64_t user_data, int result) {
  switch (op_of(user_data)) {
    case Op::kListen:
      if (!stop_requested_.load(std::memory_order_relaxed)) {
        accept_clients();
        arm_poll(control_->fd(), pack(Op::kListen, 0));
      }
      break;
    case Op::kDoorbell:
      arm_doorbell_read();
      break;
    case Op::kAttach:
      finish_attach(id_of(user_data));
      break;
    case Op::kSession:
      if (result >= 0) on_session_readable(id_of(user_data));
      break;
    case Op::kClientDoorbell:
      if (auto it = sessions_.find(id_of(user_data)); it != sessions_.end() && result >= 0) {
        it->second->drain_doorbell();
        arm_poll(it->second->doorbell_fd(), user_data);
      }
      break;
    case Op::kIgnore:
      break;
  }
}

void Daemon::reject(const PendingRequest& request, shm::WireStatus status, const char* why) {
  stats_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
  completer_.complete_one(RequestRef{request.session, request.taken.slot, request.taken.generation,
                                     request.taken.deadline_mono_ns},
                          status, why);
}

bool Daemon::admit(std::shared_ptr<ClientSession> session, const TakenRequest& taken,
                   std::int64_t now_ns) {
  PendingRequest request{std::move(session), taken, now_ns};
  const shm::RequestSlotHeader& header = *request.session->view().request_slot(taken.slot);
  if (header.cancel_generation.load(std::memory_order_relaxed) == taken.generation) {
    reject(request, shm::WireStatus::kCancelled, "request withdrawn by the client");
    return false;
  }
  if (taken.deadline_mono_ns != 0) {
    if (taken.deadline_mono_ns <= now_ns) {
      reject(request, shm::WireStatus::kTimeout, "deadline passed before the daemon took the request");
      return false;
    }
    // Everything taken and not yet answered is ahead of this request. Rejecting now, when it
    // cannot make its deadline anyway, keeps the backlog (and memory) bounded by what can be
    // served in time, and tells the caller at once instead of at its deadline.
    const std::uint64_t ahead = stats_.in_flight();
    const std::int64_t delay_ns = router_->estimate_delay_ns(ahead, config_.batch.max_batch, now_ns);
    // A fifth of the budget is kept back for what the estimate cannot see: batch-time jitter,
    // and the completion reaching the caller. deadline > now here, so budget_ns cannot
    // overflow, and taking the fifth off by division keeps a far deadline from overflowing.
    const std::int64_t budget_ns = taken.deadline_mono_ns - now_ns;
    if (delay_ns > budget_ns - budget_ns / 5) {
      reject(request, shm::WireStatus::kOverloaded,
             "overloaded: the daemon's backlog would outlast this request's deadline; retry later");
      return false;
    }
  }
  pending_.push_back(std::move(request));
  return true;
}

bool Daemon::move_into_batch(PendingRequest& request, std::int64_t now_ns) {
  Batch& batch = *open_;
  const TakenRequest& taken = request.taken;
  if (taken.deadline_mono_ns != 0 && taken.deadline_mono_ns <= now_ns) {
    reject(request, shm::WireStatus::kTimeout, "deadline passed before the request was batched");
    return false;
  }
  // Still withdrawable while it waits here: only a batch makes a request claimed.
  const shm::RequestSlotHeader& header = *request.session->view().request_slot(taken.slot);
  if (header.cancel_generation.load(std::memory_order_relaxed) == taken.generation) {
    reject(request, shm::WireStatus::kCancelled, "request withdrawn by the client");
    return false;
  }
  const std::size_t start = batch.input_bytes.size();
  batch.input_bytes.resize(start + taken.input_bytes);
  // Copy first, check the copy: the client may still be scribbling on its slot.
  if (taken.input_bytes > 0) std::memcpy(batch.input_bytes.data() + start, taken.input, taken.input_bytes);
  if (!simdjson::validate_utf8(batch.input_bytes.data() + start, taken.input_bytes)) {
    batch.input_bytes.resize(start);
    reject(request, shm::WireStatus::kInvalidUtf8, "input is not valid UTF-8");
    return false;
  }
  if (batch.requests.empty()) batch.opened_ns = request.arrival_ns;
  batch.input_offsets.push_back(static_cast<std::uint32_t>(batch.input_bytes.size()));
  batch.requests.push_back(RequestRef{std::move(request.session), taken.slot, taken.generation,
                                      taken.deadline_mono_ns});
  batcher_.add(taken.input_bytes, from_ns(request.arrival_ns));
  return true;
}

bool Daemon::fill_batches(std::int64_t now_ns) {
  bool progressed = false;
  while (!pending_.empty()) {
    if (open_ == nullptr && (open_ = router_->try_acquire()) == nullptr) break;
    PendingRequest& request = pending_.front();
    if (!batcher_.fits(request.taken.input_bytes)) {
      batcher_.mark_full();
      flush_open_batch();
      continue;  // the same request goes into the next batch
    }
    move_into_batch(request, now_ns);
    pending_.pop_front();
    progressed = true;
    if (batcher_.count() >= batcher_.limits().max_batch) flush_open_batch();
  }
  // Checked once the batch holds all it can: a request that waited for a batch object does not
  // make a batch of one.
  if (batcher_.due(from_ns(now_ns))) flush_open_batch();
  return progressed;
}

void Daemon::flush_open_batch() {
  if (open_ == nullptr || open_->requests.empty()) return;
  open_->id = next_batch_id_++;
  router_->dispatch(open_);
  open_ = nullptr;
  batcher_.reset();
}

bool Daemon::drain_rings(std::int64_t now_ns) {
  bool progressed = false;
  std::string why;
  const std::size_t clients = drain_order_.size();
  for (std::size_t visited = 0; visited < clients && !drain_order_.empty(); ++visited) {
    if (drain_cursor_ >= drain_order_.size()) drain_cursor_ = 0;
    std::shared_ptr<ClientSession> session = drain_order_[drain_cursor_++];
    for (unsigned taken_here = 0; taken_here < kBurstPerClient; ++taken_here) {
      TakenRequest taken;
      const TakeResult result = session->take(taken, why);
      if (result == TakeResult::kEmpty) break;
      if (result == TakeResult::kViolation) {
        drop_session(session->id(), why.c_str());
        break;
      }
      session->mark_in_flight(taken.slot, taken.generation);
      session->pop();
      stats_.requests_taken.fetch_add(1, std::memory_order_relaxed);
      admit(session, taken, now_ns);
      progressed = true;
    }
    session->publish();
  }
  return progressed;
}

bool Daemon::work_waiting() {
  if (std::any_of(drain_order_.begin(), drain_order_.end(),
                  [](const auto& s) { return s->has_pending(); })) {
    return true;  // rings are drained whether or not a batch object is free
  }
  return !pending_.empty() && (open_ != nullptr || (open_ = router_->try_acquire()) != nullptr);
}

void Daemon::sleep_until_work() {
  // seq_cst, as are the producers' tail stores and their reads of this flag: either they see the
  // flag and ring the doorbell, or the re-check below sees their entry.
  status_->drain_sleeping.store(1, std::memory_order_seq_cst);
  if (!work_waiting()) {
    std::int64_t wait_ns = -1;  // none: until an event
    if (!pending_.empty() && open_ == nullptr) {
      wait_ns = kPoolPollNs;  // every batch busy: a worker's doorbell wakes us; this is a net
    }
    if (auto deadline = batcher_.deadline()) {
      wait_ns = std::max<std::int64_t>(0, to_ns(*deadline) - shm::monotonic_ns());
    }
    if (!attaching_.empty()) {
      const std::int64_t until_expiry =
          std::max<std::int64_t>(0, attaching_.begin()->second.deadline_ns - shm::monotonic_ns());
      wait_ns = wait_ns < 0 ? until_expiry : std::min(wait_ns, until_expiry);
    }
    if (watchdog_interval_ns_ != 0) {
      const std::int64_t until_ping = std::max<std::int64_t>(0, next_watchdog_ns_ - shm::monotonic_ns());
      wait_ns = wait_ns < 0 ? until_ping : std::min(wait_ns, until_ping);
    }
    if (stop_requested_.load(std::memory_order_relaxed)) {
      // Stopping: poll for the last batches to come back rather than wait on clients.
      wait_ns = wait_ns < 0 ? kStopPollNs : std::min(wait_ns, kStopPollNs);
    }
    io_uring_cqe* cqe = nullptr;
    if (wait_ns >= 0) {
      __kernel_timespec ts{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
      io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    } else {
      io_uring_submit_and_wait(&ring_, 1);
    }
  }
  status_->drain_sleeping.store(0, std::memory_order_seq_cst);
}

void Daemon::run() {
  std::int64_t idle_since_ns = 0;
  std::int64_t stop_at_ns = 0;
  const std::int64_t spin_ns = static_cast<std::int64_t>(config_.drain_spin_us) * 1000;
  for (;;) {
    handle_completions();
    apply_pending_limits();
    const std::int64_t now_ns = shm::monotonic_ns();
    ping_watchdog_if_due(now_ns);
    expire_attaches(now_ns);
    const bool drained = drain_rings(now_ns);
    const bool progressed = fill_batches(now_ns) || drained;

    if (stop_requested_.load(std::memory_order_relaxed)) {
      if (stop_at_ns == 0) {
        stop_at_ns = now_ns;
        control_->close_listener();
        spdlog::info("stopping: finishing in-flight requests");
      }
      const bool rings_empty = !work_waiting() || now_ns - stop_at_ns > kStopGraceNs;
      if (rings_empty && !progressed) {
        // Whatever is open runs now rather than waiting out its window.
        flush_open_batch();
        if (open_ != nullptr && open_->requests.empty()) {
          router_->release(open_);
          open_ = nullptr;
        }
        if (router_->idle()) break;
      }
    }
    if (progressed) {
      idle_since_ns = 0;
      continue;
    }
    if (idle_since_ns == 0) idle_since_ns = now_ns;
    if (now_ns - idle_since_ns < spin_ns) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    sleep_until_work();
    idle_since_ns = 0;
  }
  router_->stop();
  // Every answer is written: tell the clients now rather than when this object goes away.
  while (!sessions_.empty()) drop_session(sessions_.begin()->first, nullptr);
  spdlog::info("stopped: {} requests taken, {} ok, {} failed, {} rejected, {} batches",
               stats_.requests_taken.load(), stats_.requests_ok.load(),
               stats_.requests_failed.load(), stats_.requests_rejected.load(),
               stats_.batches.load());
}

}  // namespace batchd

// The drain loop's io_uring: arming polls and reads, routing each completion by the operation
// packed in its user_data, and sleeping until there is work (or a deadline to keep).
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/daemon.hpp"
#include "daemon/io_ops.hpp"
#include "shm/clock.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;
using io_ops::op_of;
using io_ops::id_of;

namespace {

constexpr std::int64_t kStopPollNs = 1'000'000;

}  // namespace

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
      if (!stop_requested_.load(std::memory_order_relaxed)) accept_clients();
      break;
    case Op::kDoorbell:
      arm_doorbell_read();
      break;
    case Op::kAttach:
      if (!release_parked(user_data)) on_attach_readable(id_of(user_data));
      break;
    case Op::kSession:
      if (!release_parked(user_data) && result >= 0) on_session_readable(id_of(user_data));
      break;
    case Op::kClientDoorbell:
      if (auto it = sessions_.find(id_of(user_data)); it != sessions_.end() && result >= 0) {
        it->second->drain_doorbell();
        arm_poll(it->second->doorbell_fd(), user_data);
      }
      break;
    case Op::kWorker:
      if (!release_parked(user_data) && result >= 0) on_worker_readable(id_of(user_data));
      break;
    case Op::kIgnore:
      break;
  }
}

bool Daemon::work_waiting() {
  // Handshake steps left over by the last pass's budget.
  if (listen_deferred_ || !hellos_due_.empty()) return true;
  if (std::any_of(drain_order_.begin(), drain_order_.end(),
                  [](const auto& s) { return s->has_pending(); })) {
    return true;  // rings are drained whether or not a batch object is free
  }
  return std::any_of(models_.begin(), models_.end(), [](const auto& model) { return model->work_waiting(); });
}

void Daemon::sleep_until_work() {
  // seq_cst, as are the producers' tail stores and their reads of this flag: either they see the
  // flag and ring the doorbell, or the re-check below sees their entry.
  status_.page().drain_sleeping.store(1, std::memory_order_seq_cst);
  if (!work_waiting()) {
    std::int64_t wait_ns = -1;  // none: until an event
    const std::int64_t now_ns = shm::monotonic_ns();
    for (const auto& model : models_) {
      const std::int64_t bound_ns = model->sleep_bound_ns(now_ns);
      if (bound_ns >= 0) wait_ns = wait_ns < 0 ? bound_ns : std::min(wait_ns, bound_ns);
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
    const bool unloading = std::any_of(models_.begin(), models_.end(), [](const auto& model) {
      return model->lifecycle() == ModelPipeline::Lifecycle::kUnloading;
    });
    if (stop_requested_.load(std::memory_order_relaxed) || unloading) {
      // Stopping, or a model unloading: poll for the last batches to come back (a lane's doorbell
      // may come before the router is idle) rather than wait on clients.
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
  status_.page().drain_sleeping.store(0, std::memory_order_seq_cst);
}

}  // namespace batchd

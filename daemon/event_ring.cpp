#include "daemon/event_ring.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "daemon/io_ops.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

void EventRing::open(unsigned entries) {
  const int rc = io_uring_queue_init(entries, &ring_, 0);
  if (rc < 0) throw std::runtime_error(std::string("io_uring is not available: ") + std::strerror(-rc));
  open_ = true;
  doorbell_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!doorbell_.valid()) throw std::system_error(errno, std::generic_category(), "eventfd");
  rearm_doorbell();
}

void EventRing::close() noexcept {
  if (!open_) return;
  io_uring_queue_exit(&ring_);
  open_ = false;
}

io_uring_sqe* EventRing::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    io_uring_submit(&ring_);
    sqe = io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void EventRing::arm_poll(int fd, std::uint64_t user_data) {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
  io_uring_sqe_set_data64(sqe, user_data);
}

void EventRing::remove_poll(std::uint64_t armed) {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_poll_remove(sqe, armed);
  io_uring_sqe_set_data64(sqe, pack(Op::kIgnore, 0));
}

void EventRing::rearm_doorbell() {
  io_uring_sqe* sqe = next_sqe();
  io_uring_prep_read(sqe, doorbell_.get(), &doorbell_value_, sizeof(doorbell_value_), 0);
  io_uring_sqe_set_data64(sqe, pack(Op::kDoorbell, 0));
}

void EventRing::ring() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(doorbell_.get(), &one, sizeof(one));
}

void EventRing::wait(std::int64_t wait_ns) {
  io_uring_cqe* cqe = nullptr;
  if (wait_ns >= 0) {
    __kernel_timespec ts{wait_ns / 1'000'000'000, wait_ns % 1'000'000'000};
    io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  } else {
    io_uring_submit_and_wait(&ring_, 1);
  }
}

}  // namespace batchd

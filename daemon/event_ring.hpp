// The drain loop's io_uring and its own doorbell: polls armed and removed, completions handed
// out by the operation packed in their user_data (io_ops.hpp), and the sleep until one comes.
// The doorbell is an eventfd whose read is always posted, so any thread wakes the loop with
// one write.
#pragma once

// After anything that includes moodycamel's queue (daemon/router.hpp): <linux/fs.h>, under
// liburing, defines a BLOCK_SIZE macro that breaks it.
#include <liburing.h>

#include <cstdint>

#include "shm/fd.hpp"

namespace batchd {

class EventRing {
 public:
  EventRing() = default;
  ~EventRing() { close(); }
  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;

  // The ring of `entries` submissions, the doorbell, and its first read. Throws
  // std::runtime_error when io_uring is not available, std::system_error for the eventfd.
  void open(unsigned entries);
  // Drops the ring and whatever its polls still reference. Idempotent.
  void close() noexcept;

  // A one-shot poll for input (or hang-up) on fd, completing as user_data.
  void arm_poll(int fd, std::uint64_t user_data);
  // Cancels the poll armed as `armed`; the removal's own completion is an Op::kIgnore.
  void remove_poll(std::uint64_t armed);
  // The doorbell's read completed (Op::kDoorbell): posts the next.
  void rearm_doorbell();
  // Wakes the drain loop. Any thread; async-signal-safe.
  void ring() noexcept;

  // Hands each completion that is ready to handle(user_data, result), then submits what the
  // handlers armed.
  template <class Handle>
  void handle_completions(Handle&& handle);
  // Submits what is armed and sleeps until a completion, or for at most wait_ns (negative: no
  // bound).
  void wait(std::int64_t wait_ns);

 private:
  // A free submission entry, flushing the queue when it is full.
  io_uring_sqe* next_sqe();

  io_uring ring_{};
  bool open_ = false;
  shm::UniqueFd doorbell_;
  std::uint64_t doorbell_value_ = 0;  // target of the posted doorbell read
};

template <class Handle>
void EventRing::handle_completions(Handle&& handle) {
  io_uring_cqe* cqes[64];
  for (;;) {
    const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
    if (n == 0) break;
    for (unsigned i = 0; i < n; ++i) {
      const std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
      const int res = cqes[i]->res;
      io_uring_cqe_seen(&ring_, cqes[i]);
      handle(data, res);
    }
  }
  if (io_uring_sq_ready(&ring_) > 0) io_uring_submit(&ring_);
}

}  // namespace batchd

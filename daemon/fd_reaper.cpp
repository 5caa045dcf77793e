#include "daemon/fd_reaper.hpp"

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace batchd {

struct FdReaper::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<int> queue;  // guarded by mu
  unsigned threads = 0;   // guarded by mu
  unsigned idle = 0;      // guarded by mu: threads waiting for a descriptor
  bool stopping = false;  // guarded by mu
};

namespace {

// An idle reaper thread ends after this; the next drop starts one again.
constexpr auto kIdleExit = std::chrono::seconds(1);
// How long destruction waits for the queue to empty before leaving the rest to the exit.
constexpr auto kStopGrace = std::chrono::milliseconds(200);
// Messages read off a connection before its close; past this the kernel releases the rest.
constexpr unsigned kMaxDiscardedMessages = 64;

// A socket set to linger 0 resets instead of waiting for its unsent data at close.
void stop_lingering(int fd) noexcept {
  const linger none{1, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &none, sizeof(none));
}

bool is_socket(int fd) noexcept {
  int type = 0;
  socklen_t len = sizeof(type);
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0;
}

void close_defused(int fd) noexcept {
  if (is_socket(fd)) {
    discard_queued_fds(fd, kMaxDiscardedMessages);
    stop_lingering(fd);
  }
  ::close(fd);
}

void run(const std::shared_ptr<FdReaper::State>& s) {
  std::unique_lock lock(s->mu);
  for (;;) {
    ++s->idle;
    const bool woken = s->cv.wait_for(lock, kIdleExit, [&] { return !s->queue.empty() || s->stopping; });
    --s->idle;
    if (s->queue.empty()) {
      if (s->stopping || !woken) break;
      continue;
    }
    const int fd = s->queue.front();
    s->queue.pop_front();
    lock.unlock();
    close_defused(fd);
    lock.lock();
  }
  --s->threads;
  s->cv.notify_all();  // destruction waits for the last thread
}

}  // namespace

void discard_queued_fds(int connection, unsigned max_messages) noexcept {
  for (unsigned m = 0; m < max_messages; ++m) {
    std::byte data[64];
    std::vector<shm::UniqueFd> fds;
    // Every fd a message carries is received (none left for the kernel to drop) and closes here.
    const Expected<std::size_t> n = shm::recv_with_fds(connection, data, fds, MSG_DONTWAIT);
    for (const shm::UniqueFd& fd : fds) {
      // One level only: what a passed connection itself holds, the kernel releases.
      if (is_socket(fd.get())) stop_lingering(fd.get());
    }
    const bool truncated = !n && n.error().code == std::errc::protocol_error;
    if (!truncated && (!n || *n == 0)) return;  // nothing more queued, or the peer is gone
  }
}

FdReaper::FdReaper() : state_(std::make_shared<State>()) {}

FdReaper::~FdReaper() {
  std::unique_lock lock(state_->mu);
  state_->stopping = true;
  state_->cv.notify_all();
  if (state_->threads == 0) {
    for (int fd : state_->queue) ::close(fd);  // no thread ever started: none of these blocked
    state_->queue.clear();
    return;
  }
  state_->cv.wait_for(lock, kStopGrace, [&] { return state_->threads == 0; });
}

void FdReaper::drop(shm::UniqueFd fd) noexcept {
  if (!fd.valid()) return;
  bool spawn = false;
  {
    std::lock_guard lock(state_->mu);
    try {
      state_->queue.push_back(fd.get());
    } catch (...) {
      return;  // out of memory: fd closes here, which beats leaking it
    }
    (void)fd.release();
    if (state_->idle == 0 && state_->threads < kMaxThreads) {
      ++state_->threads;
      spawn = true;
    } else {
      state_->cv.notify_one();
    }
  }
  if (!spawn) return;
  try {
    std::thread([state = state_] { run(state); }).detach();
  } catch (...) {
    // No thread now: the descriptor waits for the next drop to start one.
    std::lock_guard lock(state_->mu);
    --state_->threads;
  }
}

std::size_t FdReaper::pending() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->queue.size() + (state_->threads - state_->idle);
}

}  // namespace batchd

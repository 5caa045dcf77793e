#include "grpc_frontend/stream_watchdog.hpp"

#include <algorithm>

#include "shm/clock.hpp"

namespace batchd::grpcfront {

StreamWatchdog::StreamWatchdog(std::chrono::milliseconds write_timeout)
    : write_timeout_(write_timeout), thread_([this] { run(); }) {}

StreamWatchdog::~StreamWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void StreamWatchdog::add(Watched* stream) {
  std::lock_guard lock(mu_);
  streams_.insert(stream);
}

void StreamWatchdog::remove(Watched* stream) {
  std::lock_guard lock(mu_);
  streams_.erase(stream);
}

void StreamWatchdog::run() {
  // A stalled stream is found within a quarter of the timeout after it passes.
  const auto period = std::max(std::chrono::milliseconds(10), write_timeout_ / 4);
  const std::int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(write_timeout_).count();
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    const std::int64_t stalled_since_ns = shm::monotonic_ns() - timeout_ns;
    // Under mu_, so a stream cannot be removed (and deleted) while it is looked at.
    for (Watched* stream : streams_) stream->cancel_if_stalled(stalled_since_ns);
  }
}

}  // namespace batchd::grpcfront

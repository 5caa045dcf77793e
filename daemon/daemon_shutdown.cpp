// The shutdown path: on SIGTERM/SIGINT the daemon stops taking new clients, finishes every request
// it holds (within a grace period for clients that keep submitting), then lets its clients go.
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"

namespace batchd {

namespace {

// How long clients that keep submitting hold up the stop: their rings are drained this long.
constexpr std::int64_t kStopGraceNs = 5'000'000'000;

}  // namespace

void Daemon::request_stop() noexcept {
  stop_requested_.store(true, std::memory_order_relaxed);
  ring_doorbell();
}

bool Daemon::stopping_done(std::int64_t now_ns, bool progressed) {
  if (stop_at_ns_ == 0) {
    stop_at_ns_ = now_ns;
    control_->close_listener();  // new attaches are refused from here on
    listen_deferred_ = false;
    spdlog::info("stopping: finishing in-flight requests");
  }
  // Batches waiting for a worker wait no more once no worker could run them (none attached, or
  // the grace is over): their callers are answered "backend unavailable".
  if (workers_ != nullptr && (workers_->attached() == 0 || now_ns - stop_at_ns_ > kStopGraceNs)) {
    router_->abandon_waiting();
  }
  const bool rings_empty = !work_waiting() || now_ns - stop_at_ns_ > kStopGraceNs;
  if (!rings_empty || progressed) return false;
  // Whatever is open runs now rather than waiting out its window.
  flush_open_batch(FlushReason::kStopping);
  if (open_ != nullptr && open_->requests.empty()) {
    router_->release(open_);
    open_ = nullptr;
  }
  return router_->idle();
}

void Daemon::finish_stop() {
  router_->stop();
  drop_all_workers();
  // Every answer is written: tell the clients now rather than when this object goes away.
  while (!sessions_.empty()) drop_session(sessions_.begin()->first, nullptr);
  spdlog::info("stopped: {} requests taken, {} ok, {} failed, {} rejected, {} batches",
               stats_.requests_taken.load(), stats_.requests_ok.load(),
               stats_.requests_failed.load(), stats_.requests_rejected.load(),
               stats_.batches.load());
}

void Daemon::finish_lost() {
  spdlog::critical("every {} device is lost: exiting with status {} so that the service manager "
                   "restarts batchd ({} requests taken, {} ok, {} failed; the clients send the "
                   "unanswered ones again)",
                   backend_->name(), kExitAllDevicesLost, stats_.requests_taken.load(),
                   stats_.requests_ok.load(), stats_.requests_failed.load());
  if (open_ != nullptr) {
    router_->release(open_);
    open_ = nullptr;
  }
  router_->stop();
  drop_all_workers();
  // Closing the control connections tells each client at once; they re-attach to the next daemon.
  while (!sessions_.empty()) drop_session(sessions_.begin()->first, nullptr);
}

}  // namespace batchd

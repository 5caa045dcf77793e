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
  events_.ring();
}

bool Daemon::stopping_done(std::int64_t now_ns, bool progressed) {
  if (stop_at_ns_ == 0) {
    stop_at_ns_ = now_ns;
    for (auto& model : models_) model->begin_stop();
    handshake_->stop_listening();  // new attaches are refused from here on
    spdlog::info("stopping: finishing in-flight requests");
  }
  // Batches waiting for a worker wait no more once no worker could run them (none attached, or
  // the grace is over): their callers are answered "backend unavailable".
  for (ModelPipeline* model : models_.served_by_workers()) {
    if (model->workers() == nullptr) continue;  // unloaded
    if (model->workers()->attached() == 0 || now_ns - stop_at_ns_ > kStopGraceNs) model->router().abandon_waiting();
  }
  const bool rings_empty = !work_waiting() || now_ns - stop_at_ns_ > kStopGraceNs;
  if (!rings_empty || progressed) return false;
  bool done = true;
  for (auto& model : models_) done = model->stopping_done() && done;
  return done;
}

void Daemon::finish_stop() {
  for (auto& model : models_) model->stop();
  drop_all_workers();
  changes_.abandon();
  // Every answer is written: tell the clients now rather than when this object goes away.
  while (!sessions_.empty()) drop_session(sessions_.any_id(), nullptr);
  spdlog::info("stopped: {} requests taken, {} ok, {} failed, {} rejected, {} batches",
               stats_.requests_taken.load(), stats_.requests_ok.load(),
               stats_.requests_failed.load(), stats_.requests_rejected.load(),
               stats_.batches.load());
}

void Daemon::finish_lost() {
  for (const auto& model : models_) {
    if (!model->running() || !model->router().all_devices_lost()) continue;
    spdlog::critical("every {} device is lost (model {}): exiting with status {} so that the service manager "
                     "restarts batchd ({} requests taken, {} ok, {} failed; the clients send the "
                     "unanswered ones again)",
                     model->backend_name(), model->config().name, kExitAllDevicesLost,
                     stats_.requests_taken.load(), stats_.requests_ok.load(), stats_.requests_failed.load());
  }
  for (auto& model : models_) model->stop();
  drop_all_workers();
  changes_.abandon();
  // Closing the control connections tells each client at once; they re-attach to the next daemon.
  while (!sessions_.empty()) drop_session(sessions_.any_id(), nullptr);
}

}  // namespace batchd

// The batchd daemon's drain loop: takes clients and workers in through the control socket's
// handshake (AttachHandshake), drains the clients' submission rings into each model's pipeline
// (ModelPipeline: admission, batching, its router's lanes) and completes each request in its slot.
// One drain thread owns the sessions, the pipelines' batching and the io_uring it sleeps on; the
// backends' lane threads complete batches.
#pragma once

// Before liburing (event_ring.hpp): <linux/fs.h> defines a BLOCK_SIZE macro that breaks
// moodycamel's queue.
#include "daemon/router.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "daemon/attach_handshake.hpp"
#include "daemon/client_session.hpp"
#include "daemon/completer.hpp"
#include "daemon/config.hpp"
#include "daemon/control_socket.hpp"
#include "daemon/event_ring.hpp"
#include "daemon/fd_reaper.hpp"
#include "daemon/log_limiter.hpp"
#include "daemon/model_changes.hpp"
#include "daemon/model_pipeline.hpp"
#include "daemon/model_registry.hpp"
#include "daemon/parked_connections.hpp"
#include "daemon/session_table.hpp"
#include "daemon/stats.hpp"
#include "daemon/status_writer.hpp"
#include "daemon/worker_backend.hpp"
#include "daemon/worker_roster.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/clock.hpp"
#include "shm/spin_advisor.hpp"
#include "shm/worker_region.hpp"
#include "status/metrics_listener.hpp"

namespace batchd {

// The exit status of a daemon whose every device is lost (Router::all_devices_lost): EX_TEMPFAIL,
// "try again later". systemd's Restart=on-failure restarts on it; the clients re-attach.
inline constexpr int kExitAllDevicesLost = 75;

class Daemon : private ModelChanges::Host {
 public:
  // backends[0] runs the default model (batchstring, from config's own settings), backends[i] the
  // model config.models[i - 1]: one each.
  Daemon(DaemonConfig config, std::vector<std::unique_ptr<Backend>> backends);
  // The default model alone (config.models must be empty).
  Daemon(DaemonConfig config, std::unique_ptr<Backend> backend);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds the control socket, sets up the drain loop and starts the backend lanes. Throws
  // std::exception with a message for the operator (socket in use, bad config, no io_uring).
  void start();

  // Serves until request_stop(); then stops accepting, finishes the requests it has taken and
  // returns. Returns early, without answering what it holds, once every device is lost
  // (all_devices_lost()): the clients run those requests again on the next daemon. Call from one
  // thread, after start().
  void run();
  // Every device of the backend is lost for good: the process should exit with
  // kExitAllDevicesLost for its service manager to restart it. Any thread, after start().
  [[nodiscard]] bool all_devices_lost() const noexcept;

  // Any thread, and async-signal-safe.
  void request_stop() noexcept;

  // The port --metrics-listen serves on (0: none); after start().
  [[nodiscard]] std::uint16_t metrics_port() const noexcept { return metrics_ ? metrics_->port() : 0; }

  // Any thread: the default model's new batching limits, applied by the drain loop before it next
  // batches (an open batch that is now over its limits is flushed at once; nothing is dropped).
  void update_limits(const BatchLimits& limits);
  // The same for the model of that name; false when there is none.
  bool update_limits(const std::string& model, const BatchLimits& limits);
  // Any thread (SIGHUP): the config re-read. The drain loop applies it before it next batches:
  // the default model's limits; each declared model's limits at once and its other settings at
  // its next load; a model added is loaded; one no longer declared is unloaded (what it holds is
  // answered) and removed: its name is unknown from then on, and its id is never another's.
  void reload(const DaemonConfig& fresh);

  // Makes a model's backend again when model control loads it (batchctl load); it runs on a
  // thread of its own, so it may take as long as a backend's start does. Without one, a load
  // is refused. Before start().
  using ModelLoader = ModelChanges::Loader;
  void set_model_loader(ModelLoader loader) { changes_.set_loader(std::move(loader)); }

  // Before run(): call ping from the drain loop at least every `interval` (the service
  // manager's watchdog), so a loop that hangs stops the pings.
  void set_watchdog(std::chrono::nanoseconds interval, std::function<void()> ping);

  [[nodiscard]] const std::string& socket_path() const noexcept { return config_.socket_path; }
  [[nodiscard]] const DaemonStats& stats() const noexcept { return stats_; }
  // The dead-letter log; valid after start().
  [[nodiscard]] const DeadLetterLog& dead_letters() const noexcept { return *dead_letters_; }
  // The default model's per-device health and counters; valid after start().
  [[nodiscard]] const std::vector<std::unique_ptr<DeviceHealth>>& devices() const noexcept {
    return models_.front().router().devices();
  }
  // The models served, by id (0: batchstring).
  [[nodiscard]] std::size_t model_count() const noexcept { return models_.size(); }

 private:
  // Routes one of the event ring's completions by its operation (daemon_io.cpp).
  void handle_event(std::uint64_t user_data, int result);

  // SIGHUP's part on the drain loop.
  void apply_reload();
  // ModelChanges::Host.
  void drop_workers_of(ModelPipeline& model) override;
  void answered(shm::UniqueFd connection) override { parked_.release(std::move(connection), 0); }
  ModelPipeline::Hooks hooks_for(ModelPipeline& model) override;
  void wake() noexcept override { events_.ring(); }
  // The attached peers' connections (daemon_peers.cpp): a client's, and a worker's one notice
  // (stopping) or hang-up, and their ends.
  void on_session_readable(std::uint64_t id);
  void on_worker_readable(std::uint64_t id);
  // `connection_polled`: as for drop_session. `why` nullptr: it left (or stopped) cleanly.
  void drop_worker(std::uint64_t id, const char* why, bool connection_polled = true);
  // Stopping: every worker is told (hung up on) once nothing is left to run.
  void drop_all_workers();
  // `connection_polled`: the session's connection poll is armed (false only while its
  // completion is being handled).
  void drop_session(std::uint64_t id, const char* why, bool connection_polled = true);

  // The drain path (daemon_batching.cpp).
  bool drain_rings(std::int64_t now_ns);
  // Hands a request taken off a ring to its model's pipeline, or fails it alone when it names
  // a model this daemon does not serve.
  void admit(std::shared_ptr<ClientSession> session, const TakenRequest& taken, std::int64_t now_ns);
  // Every model's pipeline fills its batches.
  bool fill_batches(std::int64_t now_ns);
  bool work_waiting();
  void sleep_until_work();
  void apply_pending_limits();
  // The shutdown path (daemon_shutdown.cpp): one step of stopping, true once nothing is left to
  // answer; then finish_stop lets the clients go.
  bool stopping_done(std::int64_t now_ns, bool progressed);
  void finish_stop();
  // Every device is lost: stops the lanes and lets the clients go with their requests unanswered.
  void finish_lost();
  void ping_watchdog_if_due(std::int64_t now_ns);

  // Tracing on: the span sink and the tracer (start-up: throws why it cannot be made).
  void start_tracing();
  // --metrics-listen: binds and starts the listener (start-up: throws the address's trouble).
  void start_metrics_listener();

  DaemonConfig config_;
  // First, so destroyed last: everything else may hand it descriptors until then.
  FdReaper reaper_;
  ParkedConnections parked_{reaper_};
  WorkerRoster workers_;
  DaemonStats stats_;
  // Before the completer, which keeps answers there, and the sessions, which hold its segments.
  ResponseCaches caches_{config_};
  // Before the completer and the models, which hand it requests until they stop: made by start()
  // where tracing is on.
  std::unique_ptr<RequestTracer> tracer_;
  Completer completer_{stats_, caches_};
  // Before models_: their lanes record into it until they stop.
  std::unique_ptr<DeadLetterLog> dead_letters_;
  // Devices several models' backends run on (the sim's, CUDA's), where their lanes take turns.
  // Before models_: their routers leave the groups as they stop.
  DeviceGroups device_groups_;
  // Each holds its backend, router, waiting requests and open batch.
  ModelRegistry models_;
  std::unique_ptr<ControlSocket> control_;
  // After the models: it reads them (and its publisher thread stops before they go).
  StatusWriter status_{stats_, models_.all(), models_.mu()};
  ModelChanges changes_{models_, status_, stats_, completer_, *this};

  // The drain loop's io_uring; its doorbell wakes the loop (workers, model control, stop).
  EventRing events_;

  SessionTable sessions_;
  LogLimiter log_limit_;

  std::atomic<bool> stop_requested_{false};
  std::int64_t stop_at_ns_ = 0;  // when the drain loop first saw the stop request

  // After what it reads and adds to; made by start(), once the control socket is bound.
  std::unique_ptr<AttachHandshake> handshake_;

  std::atomic<bool> limits_changed_{false};  // some model has new limits to apply
  std::mutex reload_mu_;
  std::optional<DaemonConfig> reload_;  // guarded by reload_mu_: the config a SIGHUP re-read
  std::atomic<bool> reload_pending_{false};

  shm::SpinAdvisor drain_spin_;  // drain loop only: whether its idle spins pay

  // How often the drain loop adds up the clients' own response-cache hits (ClientSession::
  // credit_cache_hits) for the metrics.
  static constexpr std::int64_t kCacheTallyPeriodNs = 100'000'000;
  std::int64_t next_cache_tally_ns_ = 0;

  std::int64_t watchdog_interval_ns_ = 0;  // 0: no watchdog
  std::int64_t next_watchdog_ns_ = 0;
  std::function<void()> watchdog_ping_;

  // Last: it reads the status page until it stops, so it is destroyed first.
  std::unique_ptr<MetricsListener> metrics_;
};

}  // namespace batchd

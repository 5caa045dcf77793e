// One model the daemon serves: its backend and the router over that backend's devices, the
// requests admitted for it and waiting, the batch being filled and the policy that decides when
// it goes. A batch never mixes models: each pipeline fills its own. The drain loop (Daemon) takes
// requests off the clients' rings and hands each to its model's pipeline; everything here runs on
// the drain thread unless a method says otherwise.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "backend/backend.hpp"
#include "daemon/admission.hpp"
#include "daemon/arrival_rates.hpp"
#include "daemon/batch_policy.hpp"
#include "daemon/batch_shares.hpp"
#include "daemon/batcher.hpp"
#include "daemon/coalescer.hpp"
#include "daemon/completer.hpp"
#include "daemon/config.hpp"
#include "daemon/input_arena.hpp"
#include "daemon/pending_queue.hpp"
#include "daemon/request_tracer.hpp"
#include "daemon/router.hpp"
#include "daemon/stats.hpp"
#include "daemon/worker_backend.hpp"
#include "shm/layout.hpp"

namespace batchd {

class ModelPipeline {
 public:
  // What the pipeline is told of the daemon around it at start().
  struct Hooks {
    std::function<void()> on_batch_freed;  // a batch object returned to the pool (any thread)
    std::function<void()> on_tick;         // the router's watchdog pass (its thread)
    DeadLetterLog* dead_letters = nullptr;
    DeviceGroups* device_groups = nullptr;  // where a backend's shared devices are taken turns on
    RequestTracer* tracer = nullptr;        // none: nothing is traced
  };

  // `id`: the model id requests name it by (0: the default model). The batching limits are fitted
  // to the backend here (logged). Without a backend the model starts unloaded (a reload adds it,
  // then loads it).
  ModelPipeline(std::uint32_t id, ModelConfig config, std::unique_ptr<Backend> backend, DaemonStats& stats,
                Completer& completer);
  ~ModelPipeline();
  ModelPipeline(const ModelPipeline&) = delete;
  ModelPipeline& operator=(const ModelPipeline&) = delete;

  // Makes the router (and, for workers, the arena they read batches from); throws what stops
  // the start. Then start_lanes() starts its lanes and watchdog.
  void prepare(Hooks hooks);
  void start_lanes() { router_->start(); }
  // A model added unloaded (by a reload) is given the hooks its first load prepares with.
  void set_hooks(Hooks hooks) { hooks_ = std::move(hooks); }

  // The model's life between the daemon's start and stop, as model control changes it
  // (shm/model_control.hpp): loaded; unloading (admits nothing, answers what it holds); unloaded
  // (its backend, router and lanes released); loading (a backend being made off the drain
  // thread); removed (a reload dropped it from the config: unloaded, and its name unknown to
  // requests, workers and control until a reload declares it again, at the same id). Written by
  // the drain thread; any thread reads it.
  enum class Lifecycle : std::uint32_t { kLoaded, kUnloading, kUnloaded, kLoading, kRemoved };
  [[nodiscard]] Lifecycle lifecycle() const noexcept { return lifecycle_.load(std::memory_order_acquire); }
  // Whether its backend and router exist (loaded or unloading): the drain thread's, or the
  // caller holds what keeps the drain thread from releasing them (Daemon::models_mu_).
  [[nodiscard]] bool running() const noexcept { return router_ != nullptr; }
  // Refuses what comes from here on; the open batch goes at once. unloading_done() then says
  // when what it took is answered, and release() lets its backend go.
  void begin_unload() noexcept;
  [[nodiscard]] bool unloading_done() { return stopping_done(); }
  // Stops the lanes and destroys router and backend (device memory, a plug-in's state). The
  // caller has dropped a workers model's workers first.
  void release() noexcept;
  void begin_load() noexcept { lifecycle_.store(Lifecycle::kLoading, std::memory_order_release); }
  // A backend made for it (by the loader, off this thread) runs it again: prepare() with the
  // start's hooks, then start_lanes(). Throws what stops it (the model stays unloaded).
  void load(std::unique_ptr<Backend> backend);
  void abort_load() noexcept { lifecycle_.store(Lifecycle::kUnloaded, std::memory_order_release); }
  // A reload: an unloaded model is removed; a removed one comes back unloaded, to load.
  void remove() noexcept;
  void restore() noexcept { lifecycle_.store(Lifecycle::kUnloaded, std::memory_order_release); }
  // A reload's declaration of the model, for its next load: the backend's settings (and the
  // version) take effect then; the batching limits at once (update_limits). Drain thread, and
  // only while unloaded or removed for the version (the status page shows it).
  void redeclare(const ModelConfig& config);
  // The class floors (PendingQueue::set_floors), in percent: at once, for what waits now too.
  // Drain thread.
  void set_floors(std::uint32_t normal_percent, std::uint32_t low_percent) noexcept;
  // What the next load makes its backend from.
  [[nodiscard]] const ModelConfig& declared() const noexcept { return declared_; }
  // Whether worker processes run it (config `backend = "workers"`), loaded or not.
  [[nodiscard]] bool by_workers() const noexcept { return by_workers_; }
  // Its backend's name ("cpu", "workers", ...), loaded or not.
  [[nodiscard]] const std::string& backend_name() const noexcept { return backend_name_; }

  [[nodiscard]] std::uint32_t id() const noexcept { return id_; }
  [[nodiscard]] const ModelConfig& config() const noexcept { return config_; }
  [[nodiscard]] const BatchLimits& limits() const noexcept { return config_.settings.batch; }
  [[nodiscard]] Backend& backend() const noexcept { return *backend_; }
  [[nodiscard]] Router& router() const noexcept { return *router_; }
  // The workers backend, when this model runs in worker processes; else nullptr.
  [[nodiscard]] WorkerBackend* workers() const noexcept { return workers_; }
  [[nodiscard]] const InputArena& input_arena() const noexcept { return input_arena_; }

  // One drain pass: a request taken off a ring for this model. Rejects what must not wait
  // (withdrawn, expired, or bound to miss its deadline behind the backlog) and queues the rest;
  // returns whether it was queued.
  bool admit(PendingRequest request, std::int64_t now_ns);
  // The pass took these for this model (the arrival rates the policy and admission read).
  void note_taken(shm::WirePriority priority, std::uint64_t bytes) noexcept;
  // The pass is over: its arrivals are counted, and the next pass reads the lanes afresh.
  // `backlog`: it left requests on a ring, which the next pass takes at once (PolicyView).
  void end_pass(std::int64_t now_ns, bool backlog) noexcept;
  // Moves waiting requests into batches and hands full or due ones to the router.
  bool fill_batches(std::int64_t now_ns);
  // Copies the policy's view (arrival rate, n*) into its counters (and, for the default model,
  // the daemon-wide stats) every kPolicyStatsPeriodNs.
  void refresh_policy_stats(std::int64_t now_ns) noexcept;

  // Whether a pass would make progress now (the drain loop sleeps only when none would).
  [[nodiscard]] bool work_waiting();
  // How long the drain loop may sleep for this model: -1 until an event.
  [[nodiscard]] std::int64_t sleep_bound_ns(std::int64_t now_ns) const noexcept;
  // Requests taken off the rings for this model, admitted or not. Any thread.
  [[nodiscard]] std::uint64_t taken() const noexcept { return taken_.load(std::memory_order_relaxed); }
  // Requests waiting for a batch, of every class.
  [[nodiscard]] std::size_t waiting() const noexcept { return pending_.size(); }
  // A client has gone: its waiting requests are dropped; returns how many.
  std::size_t forget(std::uint64_t session_id) { return pending_.forget(session_id); }

  // Any thread: new batching limits, applied (and fitted to the backend) by apply_pending_limits
  // on the drain thread before it next batches (an open batch now over them is flushed at once;
  // nothing is dropped).
  void update_limits(const BatchLimits& limits);
  // Returns true when limits were applied (the caller republishes them).
  bool apply_pending_limits();

  // Stopping: lanes are no longer held for (the open batch goes as soon as it can).
  void begin_stop() noexcept { stopping_ = true; }
  // One step of stopping, once nothing is left on the rings: the open batch runs now; true once
  // nothing this model took is left to answer.
  bool stopping_done();
  // Returns the open batch unused and stops the lanes (none while unloaded).
  void stop() noexcept;

 private:
  void reject(const PendingRequest& request, shm::WireStatus status, const char* why);
  // Rejects a request its client withdrew, or one past its deadline (saying late_why); returns
  // whether it did.
  bool rejected_as_gone(const PendingRequest& request, std::int64_t now_ns, const char* late_why);
  // Admission's verdict (admission.hpp) on a request with a deadline.
  bool would_miss_deadline(const TakenRequest& taken, std::int64_t now_ns);
  // Whether `request` joining the open batch would make a request of another tenant (or class)
  // already in it wait more than twice its time alone, past the fair slice: then the batch is
  // cut and `request` opens the next. Never while one group fills the batch, so a lone tenant
  // (or one behind a front-end) keeps full batches.
  [[nodiscard]] bool cut_for_fairness(const PendingRequest& request, std::int64_t now_ns) noexcept;
  // The policy's verdict on the open batch now; remembers when to look again while it holds.
  FlushDecision decide_flush(std::int64_t now_ns);
  // The adaptive rule holds the open batch until a lane frees (every lane is busy): requests
  // then wait in pending_ rather than join it.
  [[nodiscard]] bool holding_for_lane(const Router::LaneView& lanes) const noexcept;
  bool move_into_batch(PendingRequest& request, std::int64_t now_ns);
  // Answers a request about to join a batch from the response cache, or makes it follow an
  // identical request in flight (daemon/coalescer.hpp); false when it must run (it may lead).
  bool answered_without_running(RequestRef& ref, std::string_view input);
  void flush_open_batch(FlushReason reason);
  void trace_flush(FlushReason reason);  // with --log-level trace: one line per batch
  // The most the open batch takes of the requests waiting now (BatchPolicy::take_limit).
  [[nodiscard]] std::uint32_t take_limit(std::int64_t now_ns) noexcept;
  [[nodiscard]] PolicyView policy_view(const Router::LaneView& lanes, std::int64_t now_ns) const noexcept;
  // The lanes as fill_batches sees them: read once, and again after each batch it hands them (a
  // lane freeing meanwhile is seen by the next pass; work_waiting reads them afresh).
  const Router::LaneView& pass_lanes(std::int64_t now_ns) noexcept;
  // How close to its deadline a waiting request of a lower class jumps the queue.
  [[nodiscard]] std::int64_t urgent_ns_before_deadline(std::int64_t now_ns) noexcept;
  // The policy cut to what the backend can run (Backend::capacity), with a warning when it was.
  [[nodiscard]] BatchLimits fit_to_backend(BatchLimits limits, const char* when) const;
  // Raises the hang timeout to the backend's worst batch time (Backend::worst_batch_time).
  void fit_timeout_to_backend();
  // The workers backend: the arena its batches are assembled in, one slot per pooled batch
  // (start-up: throws what stops it).
  void create_input_arena();

  // Fits limits and timeout to backend_, which is new (construction, load).
  void fit_to_new_backend(const char* when);

  const std::uint32_t id_;
  ModelConfig config_;
  ModelConfig declared_;  // as the config declares it (config_ is fitted to the backend)
  std::unique_ptr<Backend> backend_;  // none while unloaded
  WorkerBackend* workers_ = nullptr;  // backend_, when it is the workers backend
  bool by_workers_ = false;
  std::string backend_name_;
  Hooks hooks_;  // the start's, for a load
  std::atomic<Lifecycle> lifecycle_{Lifecycle::kLoaded};
  DaemonStats& stats_;
  Completer& completer_;
  // The workers backend's batches are assembled here (before router_: its batches point into it).
  InputArena input_arena_;
  std::unique_ptr<Router> router_;

  PendingQueue pending_;  // admitted, waiting for a batch
  Coalescer coalescer_;   // identical requests in flight (config_.settings.coalesces())
  std::string cache_answer_;  // answered_without_running's scratch
  WaitOrFullBatcher batcher_;
  BatchShares shares_;  // the open batch's requests by tenant and class
  BatchPolicy policy_;
  ArrivalRates arrivals_;  // taken from the rings
  Admission admission_;
  std::int64_t recheck_ns_ = 0;  // when the held open batch must be looked at again; 0: on events
  bool held_for_lane_ = false;   // the last decision held the open batch because no lane was idle
  bool drain_backlog_ = false;   // the last pass left requests on a ring
  std::optional<Router::LaneView> pass_lanes_;  // pass_lanes()'s
  static constexpr std::int64_t kPolicyStatsPeriodNs = 10'000'000;
  std::int64_t next_policy_stats_ns_ = 0;
  Batch* open_ = nullptr;  // the batch being filled, from the router's pool
  std::uint64_t next_batch_id_ = 1;
  bool stopping_ = false;
  std::atomic<std::uint64_t> taken_{0};

  std::mutex limits_mu_;
  BatchLimits pending_limits_;           // guarded by limits_mu_
  std::atomic<bool> limits_changed_{false};
};

}  // namespace batchd

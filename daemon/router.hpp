// Routes batches to the backend's devices and streams and keeps every request answered when a
// device fails: a batch goes to the lane where it is expected to finish first; a device
// that fails or times out is marked unhealthy, its work re-runs elsewhere, and it is probed again
// after a back-off; a batch that fails is retried once on another device and then split, until
// a failing input fails alone, which the dead-letter log records. A device whose memory is short (memory_budget.hpp) gets only
// batches that fit it; one that fits no device waits (router_memory.cpp). Owns the pool of batch
// objects and one worker thread per lane.
#pragma once

#include <concurrentqueue/blockingconcurrentqueue.h>
#include <concurrentqueue/concurrentqueue.h>

#include <algorithm>
#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "daemon/batch.hpp"
#include "daemon/completer.hpp"
#include "daemon/cost_model.hpp"
#include "daemon/dead_letter_log.hpp"
#include "daemon/device_group.hpp"
#include "daemon/device_health.hpp"
#include "daemon/laggard_verdict.hpp"
#include "daemon/memory_budget.hpp"
#include "daemon/router_options.hpp"
#include "daemon/stats.hpp"

namespace batchd {

class Router {
 public:
  // How often a laggard device (or an idle one) gets a probe: a copy of requests, which delays
  // no caller (router_pick.cpp).
  static constexpr std::int64_t kProbeIntervalNs = 500'000'000;

  // on_batch_freed runs after each batch object returns to the pool (the drain loop uses it to
  // wake itself when it was waiting for one); on_tick runs on the watchdog thread every few
  // tens of milliseconds (the daemon publishes its status from it), and on whichever thread
  // fails a batch because no device is available, before its callers are answered.
  Router(Backend& backend, Completer& completer, RouterOptions options,
         std::function<void()> on_batch_freed, std::function<void()> on_tick);
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  ~Router();

  // Before start(): where requests whose input fails alone are recorded (borrowed; none: not
  // recorded).
  // Where single requests that fail alone are recorded, tagged with `model`, the model's name.
  // Its devices are shared with other models' routers (Backend::device_group()): each run waits
  // for this model's turn on its device there. Before start().
  void share_devices(std::shared_ptr<DeviceGroup> group);
  [[nodiscard]] bool shares_devices() const noexcept { return group_ != nullptr; }
  void set_dead_letters(DeadLetterLog* log, std::string model) {
    dead_letters_ = log;
    dead_letter_model_ = std::move(model);
  }
  // Before start(): where each successful run's queue and compute times go (borrowed; none: not
  // recorded).
  // Where its runs are recorded: the daemon's latency histograms (compute time by device only
  // where `devices_on_page`: the status page's devices are the default model's) and its model's
  // counters.
  void set_latency(LatencyStats* latency, ModelCounters* counters, bool devices_on_page) noexcept {
    latency_ = latency;
    counters_ = counters;
    devices_on_page_ = devices_on_page;
  }
  // Before start(): gives the pool's batch objects a slot of the arena each, as far as its slots
  // go (daemon/input_arena.hpp). Batches made beyond the pool later stay on the heap.
  void place_batches_in(const InputArena& arena);
  [[nodiscard]] std::size_t pool_size() const noexcept { return batches_.size(); }

  void start();
  // Interrupts the backend, stops the workers and the watchdog. Call once nothing is pending.
  void stop() noexcept;

  // Drain thread: an empty batch to fill, or nullptr when all are in use.
  [[nodiscard]] Batch* try_acquire() noexcept;
  // Returns an unused batch (acquired but never dispatched).
  void release(Batch* batch) noexcept;
  // Any thread: sends a filled batch to a lane, or answers it "backend unavailable" when no
  // device can take it.
  void dispatch(Batch* batch) noexcept;
  // Drain thread: runs the batch here and completes it when the backend runs_inline() and the
  // batch is measured to be cheap (RouterOptions::inline_run_max); otherwise dispatch(). A
  // failure takes the same path as a lane's (retry elsewhere, split, canary).
  void run_or_dispatch(Batch* batch) noexcept;
  // No request is waiting on a batch (abandoned runs of hung devices do not count).
  [[nodiscard]] bool idle() const noexcept {
    return in_use_.load(std::memory_order_acquire) == abandoned_.load(std::memory_order_acquire);
  }

  // What admission needs to predict a request's wait, taken once per drain pass.
  struct DelayView {
    unsigned lanes = 0;                // available
    CostFit cost;                      // their mean fit
    std::int64_t first_free_ns = 0;    // until the first lane has run what it holds (fitted cost)
    std::uint64_t dispatched = 0;      // requests handed to lanes and not finished
    std::uint64_t measured_batch_ns = 0;  // mean measured batch time of the lanes counted on
  };
  [[nodiscard]] DelayView delay_view(std::int64_t now_ns) const noexcept;
  // How long until a request is answered that has `waiting_ahead` requests not yet dispatched
  // before it: from the fitted batch cost, until the first lane frees (its running and queued
  // batches' predicted times), then the requests ahead and this one leave in batches as big as
  // they fill (up to max_batch) on every available lane. From the measured batch time while no
  // fit is trusted; 0 while nothing is measured or no device is available (then dispatch answers
  // at once anyway).
  [[nodiscard]] static std::int64_t estimate_delay_ns(const DelayView& view, std::uint64_t waiting_ahead,
                                                      std::uint32_t max_batch) noexcept;

  [[nodiscard]] const std::vector<std::unique_ptr<DeviceHealth>>& devices() const noexcept {
    return health_;
  }
  // Every device is lost for good (Backend::device_lost): nothing can run in this process any
  // more. From then on batches are left unanswered, for the clients to run again on the daemon
  // that replaces this one. Any thread.
  [[nodiscard]] bool all_devices_lost() const noexcept {
    return !health_.empty() && lost_devices_.load(std::memory_order_acquire) == health_.size();
  }
  // Some device runs its warm-up (RouterOptions::warmup) and takes no request until it is done;
  // meanwhile a batch no other device can take waits for it. Any thread.
  [[nodiscard]] bool warming() const noexcept {
    return std::any_of(speed_.begin(), speed_.end(),
                       [](const auto& s) { return s->warming.load(std::memory_order_acquire) != 0; });
  }
  // Requests in batches handed to lanes (queued or running) and not finished.
  [[nodiscard]] std::uint64_t dispatched_requests() const noexcept;
  // A device's fitted batch cost.
  [[nodiscard]] CostFit cost_fit(unsigned device) const noexcept { return cost_[device]->fit(); }
  // The devices (of the first 64) far slower than the fastest now (router_pick.cpp). Any thread.
  [[nodiscard]] std::bitset<64> laggards(std::int64_t now_ns) const noexcept;

  // Devices that come and go (worker processes; the daemon's attach thread calls these). A new
  // device in `device`'s place, with `streams` of its lanes open: nothing learnt of the one before
  // applies to it, and batches waiting for a device are sent at once.
  void open_device(unsigned device, unsigned streams) noexcept;
  // The device in that place has gone: it takes no new batch, and those queued for it go
  // elsewhere. Its running batches end through the backend (a device fault).
  void close_device(unsigned device) noexcept;
  // Stopping: batches still waiting for a device wait no more; their callers are answered
  // "backend unavailable" (RouterOptions::wait_for_devices no longer holds them). Any thread.
  void abandon_waiting() noexcept;

  // What the batching policy needs to know of the lanes: how many can take work now, how many of
  // them are idle, and what a batch costs on them (the mean fit of the available devices that
  // have one). Drain thread; reads atomics only.
  struct LaneView {
    unsigned lanes = 0;
    unsigned idle_lanes = 0;
    CostFit cost;
    std::int64_t last_batch_end_ns = 0;  // the latest a batch succeeded on any of them
  };
  [[nodiscard]] LaneView lane_view(std::int64_t now_ns) const noexcept;
  // Whether a batch of `items` would run on the drain thread (run_or_dispatch): the backend runs
  // inline and a healthy, measured device would run it within inline_run_max. Drain thread.
  [[nodiscard]] bool would_run_inline(std::uint32_t items, std::int64_t now_ns) const noexcept;

  // Device memory (router_memory.cpp). The largest input bytes a batch may hold and still fit the
  // memory of some available device (kMaxBatchBytes when no device limits it): the drain loop
  // caps its batches by it. Any thread; reads atomics only.
  [[nodiscard]] std::uint64_t byte_budget(std::int64_t now_ns) const noexcept;
  // A device's last memory reading and byte budget (kMaxBatchBytes when unlimited). Any thread.
  struct MemoryView {
    DeviceMemory reading;
    std::uint64_t byte_budget = 0;
  };
  [[nodiscard]] MemoryView device_memory(unsigned device) const noexcept;

 private:
  struct Lane {
    LaneId id;
    moodycamel::BlockingConcurrentQueue<Batch*> queue;  // nullptr tells the worker to exit
    std::atomic<std::uint64_t> outstanding{0};   // batches queued or running here
    std::atomic<std::uint64_t> outstanding_items{0};  // their requests
    std::atomic<std::uint64_t> running_items{0};      // requests in the running one
    std::atomic<Batch*> running{nullptr};        // what the watchdog checks
    std::atomic<std::uint64_t> running_token{0};
    std::atomic<std::int64_t> started_ns{0};
    std::atomic<std::int64_t> predicted_ns{0};   // the running batch's, by its device's fit
    std::atomic<bool> stuck{false};              // its run was abandoned and has not returned
    std::atomic<bool> open{true};                // the device in its place runs this stream
    std::thread worker;
  };

  enum class Verdict { kInputFails, kDeviceBroken, kUnknown };

  // Whether a lane can take work now: its device available and warmed up, the lane open and not
  // stuck.
  [[nodiscard]] bool lane_usable(const Lane& lane, std::int64_t now_ns) const noexcept {
    return health_[lane.id.device]->available(now_ns) && !lane.stuck.load(std::memory_order_acquire) &&
           lane.open.load(std::memory_order_acquire) &&
           speed_[lane.id.device]->warming.load(std::memory_order_acquire) == 0;
  }
  // Whether the lane's running batch has run far past its prediction (kStallFactor times and
  // kStallSlackNs more), or to the hang timeout: its lane is stalled, and nothing should wait
  // behind it. Routing takes it last, the policy and admission do not count on it, and the
  // watchdog moves its queued batches to lanes that run.
  [[nodiscard]] bool stalled(const Lane& lane, std::int64_t now_ns) const noexcept;
  // Whether the policy and admission count on a lane: usable and not stalled, and not a
  // laggard's unless `laggards_too` (no other lane is counted on: see counts_laggards()).
  [[nodiscard]] bool counted_on(const Lane& lane, const PoolSpeed& speed, bool laggards_too,
                                std::int64_t now_ns) const noexcept;
  // No lane but laggards' can be counted on (the others stalled or gone): then theirs are, as
  // routing sends them the work.
  [[nodiscard]] bool counts_laggards(const PoolSpeed& speed, std::int64_t now_ns) const noexcept;
  // A device's bit in Batch::failed_devices (devices past 64 have none: never avoided).
  static constexpr std::uint64_t device_bit(unsigned device) noexcept {
    return device < 64 ? std::uint64_t{1} << device : 0;
  }

  // One device's memory as last read (by the watchdog, or by a lane about to run a batch there);
  // atomics, as any thread reads them.
  struct MemoryState {
    std::atomic<std::uint64_t> total_bytes{0};
    std::atomic<std::uint64_t> free_bytes{0};
    std::atomic<std::uint64_t> batch_bytes{0};
    std::atomic<std::int64_t> room{kUnlimitedRoom};  // memory_room_bytes
    std::atomic<std::uint64_t> byte_budget{0};
  };

  void worker(Lane& lane) noexcept;
  // Waits for the model's turn on the lane's device, when it is shared (group_); counts the wait.
  DeviceGroup::Ticket take_turn(const Lane& lane, double items, double bytes) noexcept;
  // The hang timeout (RouterOptions::device_timeout) in nanoseconds: what the watchdog abandons a
  // run at, and the longest a stalled lane is expected to hold its run.
  [[nodiscard]] std::int64_t device_timeout_ns() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(options_.device_timeout).count();
  }
  // inline_run_max in nanoseconds; 0 where batches never run on the drain thread.
  [[nodiscard]] std::uint64_t inline_budget_ns() const noexcept;
  // Whether device h, healthy and measured, would run a batch of `items` within inline_run_max.
  [[nodiscard]] bool runs_inline_on(const DeviceHealth& h, std::size_t items, std::int64_t now_ns) const noexcept;
  // The healthy lane whose device would run this batch within inline_run_max, or nullptr.
  Lane* inline_lane(const Batch& batch, std::int64_t now_ns) noexcept;
  BackendStatus run_guarded(LaneId lane, const BatchInput& in, BatchOutput& out) noexcept;
  // The lane is done with a run: its load counts drop. False, and the batch back in the pool,
  // when the watchdog abandoned that run meanwhile (a copy runs elsewhere).
  bool settle(Lane& lane, Batch* batch) noexcept;
  void finish(Lane& lane, Batch* batch, BackendStatus status) noexcept;
  // A batch that ran on `device` (inline or on a lane): the device's record, and its callers
  // answered.
  void complete_success(unsigned device, Batch* batch, const BackendStatus& status, std::int64_t run_ns,
                        std::int64_t now_ns) noexcept;
  void on_failure(Lane& lane, Batch* batch, std::string message) noexcept;
  // Runs the canary on this lane: tells a poison input from a broken device.
  Verdict check_with_canary(Lane& lane) noexcept;
  void remember_canary(const Batch& batch) noexcept;
  // An input that failed alone on every device it tried (on `device` last): its own backend
  // error, and a dead letter. `proven`: a known-good input still ran there.
  void complete_single_failure(Batch* batch, unsigned device, bool proven) noexcept;
  // Marks the device lost once the backend says it is (its failures, or the watchdog's look).
  void note_if_lost(unsigned device) noexcept;
  void watchdog() noexcept;
  void check_lane_timeout(Lane& lane, std::int64_t now_ns) noexcept;
  // Drops one of an abandoned run's two holds (Batch::abandon_holds); the last returns the batch.
  void let_go_of_abandoned(Batch* batch) noexcept;
  void requeue_from_unavailable(std::int64_t now_ns) noexcept;
  // Takes a batch that was queued on the lane but will not run there off its load counts.
  void unqueue(Lane& lane, const Batch& batch) noexcept;
  // Where a batch goes (router_pick.cpp). The lane where it is expected to finish first, or
  // nullptr; *memory_short, if given, is set when an available device was passed over because the
  // batch does not fit its memory.
  Lane* pick_lane(const Batch& batch, std::int64_t now_ns, bool* memory_short = nullptr) noexcept;
  // A device's predicted run time for a batch: its fit, else its measured mean batch time; 0
  // while nothing is measured there.
  [[nodiscard]] double predict_run_ns(unsigned device, double items, double bytes) const noexcept;
  // The laggards and the fastest device (laggard_verdict.hpp), as of at most kSpeedRefreshNs
  // ago: every batch's pass reads them several times, and the fits they come from move by one
  // batch's weight at a time.
  [[nodiscard]] PoolSpeed pool_speed(std::int64_t now_ns) const noexcept {
    if (now_ns < speed_due_ns_.load(std::memory_order_acquire)) {
      return {speed_fastest_ns_.load(std::memory_order_relaxed), speed_fastest_device_.load(std::memory_order_relaxed),
              speed_laggards_.load(std::memory_order_relaxed)};
    }
    return measure_pool_speed(now_ns);
  }
  [[nodiscard]] PoolSpeed measure_pool_speed(std::int64_t now_ns) const noexcept;
  // A device's evidence window opens: it arrived, or its cost is measured afresh.
  void open_window(unsigned device, std::int64_t now_ns) noexcept;
  // The next pool_speed() recomputes: a device's fit was reset.
  void refresh_pool_speed() noexcept { speed_due_ns_.store(0, std::memory_order_relaxed); }
  // Before `batch` goes to a lane: a laggard device that is idle and was not probed for
  // kProbeIntervalNs gets a copy of some of its requests (Batch::shadow), so its estimate stays
  // fresh and it is used again once it recovers, at no caller's cost.
  void probe_laggards(const Batch& batch, std::int64_t now_ns) noexcept;
  // A probe ran in run_ns: a device far faster than predicted, or about as fast as the fastest
  // would run the same probe, has recovered; what was learnt of it goes, and its evidence window
  // opens again (laggard_verdict.hpp). Call before record_success.
  void learn_from_probe(unsigned device, const Batch& probe, std::int64_t run_ns) noexcept;
  // Puts a batch on a lane's queue, counted in its load.
  void enqueue_on(Lane& lane, Batch* batch) noexcept;
  // How long until the lane has run what it holds, at the fitted cost.
  std::int64_t lane_busy_for_ns(const Lane& lane, const CostFit& cost, std::int64_t now_ns) const noexcept;
  bool any_available_outside(std::uint64_t mask, std::int64_t now_ns) const noexcept;
  Batch* acquire_extra();
  void fail_unavailable(Batch* batch) noexcept;
  // A batch whose device went away under it: the same batch, blameless, to another device.
  void rerun_after_device_fault(Lane& lane, std::uint64_t incarnation, Batch* batch,
                                std::string message) noexcept;
  // Holds a batch until a device arrives (RouterOptions::wait_for_devices).
  void hold_for_device(Batch* batch, std::int64_t now_ns) noexcept;
  // Answers the requests of a waiting batch whose deadline has passed; false if none is left.
  bool expire_waiting(Batch* batch, std::int64_t now_ns) noexcept;
  // A device's warm-up batches (RouterOptions::warmup), counted in its SpeedState::warming before
  // its lanes could be picked; send_warmup then queues them on its open lanes in turn. Warm-up
  // batches are probes: a failure, a hang or a redirect drops them, and the last one released
  // lets the device take requests.
  std::vector<Batch*> make_warmup(unsigned device) noexcept;
  void send_warmup(unsigned device, const std::vector<Batch*>& batches) noexcept;
  // A warm-up batch is done with (run, dropped, or abandoned as hung): its device's count drops.
  void finish_warmup(Batch& batch) noexcept;
  // Warm-up batches a device runs at most, whatever the config asks: they are made at once.
  static constexpr std::size_t kMaxWarmupBatches = 64;
  // Wakes the watchdog for a pass now (a device arrived or left).
  void kick_watchdog() noexcept;
  // A batch ran successfully on `device` in run_ns: health and the cost fit learn of it.
  void record_success(unsigned device, const Batch& batch, std::int64_t run_ns, std::int64_t now_ns) noexcept;
  // The latency histograms' part of it: each request's wait until the run started, by class.
  void record_latency(unsigned device, const Batch& batch, std::int64_t started_ns, std::int64_t run_ns) noexcept;

  // Device memory (router_memory.cpp). Watchdog: reads every device's memory, keeps its room and
  // byte budget.
  void refresh_memory() noexcept;
  // Reads one device's memory and keeps it; returns its room (memory_room_bytes).
  std::int64_t read_memory(unsigned device) noexcept;
  // Lane, before a run: whether the batch still fits its device's memory as read now.
  [[nodiscard]] bool fits_at_launch(const Lane& lane, const Batch& batch) noexcept;
  // At start: what each device reports, and whether feedback acts on it.
  void log_memory() const;
  // Device memory `batch` needs, and whether that fits `device` now (always when memory is not
  // limited or the batch ignores it).
  [[nodiscard]] std::uint64_t memory_need(const Batch& batch) const noexcept;
  [[nodiscard]] bool fits_memory(const Batch& batch, std::uint64_t need, unsigned device) const noexcept;
  // A batch that fits no available device's memory: split it when smaller batches fit somewhere,
  // run it anyway when it could never fit, else hold it until memory frees.
  void hold_for_memory(Batch* batch, std::int64_t now_ns) noexcept;
  // Watchdog: sends the held batches again; one held for device_timeout runs whatever the memory.
  void retry_held(std::int64_t now_ns) noexcept;

  Backend& backend_;
  Completer& completer_;
  DeadLetterLog* dead_letters_ = nullptr;
  std::string dead_letter_model_;
  LatencyStats* latency_ = nullptr;
  ModelCounters* counters_ = nullptr;  // its model's
  bool devices_on_page_ = true;
  RouterOptions options_;
  std::function<void()> on_batch_freed_;
  std::function<void()> on_tick_;

  std::vector<std::unique_ptr<DeviceHealth>> health_;  // by device index
  std::vector<std::unique_ptr<CostModel>> cost_;       // by device index
  std::vector<std::unique_ptr<Lane>> lanes_;           // device-major: device d, stream s
  std::shared_ptr<DeviceGroup> group_;  // devices shared with other models; null: its own
  DeviceGroup::MemberId member_ = 0;
  std::vector<unsigned> group_device_;  // by device index: its place in group_
  std::atomic<bool> leaving_group_{false};  // stopping: turns are no longer waited for
  std::mutex batches_mu_;                              // guards batches_ growth (rare path)
  std::vector<std::unique_ptr<Batch>> batches_;        // owns every batch; queues borrow
  moodycamel::ConcurrentQueue<Batch*> free_;
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> abandoned_{0};
  std::atomic<std::uint32_t> rotation_{0};  // spreads ties between equally loaded lanes
  std::atomic<std::size_t> lost_devices_{0};  // devices in DeviceState::kLost

  // Device faults one batch may see before it is suspected of causing them (router_devices.cpp).
  static constexpr unsigned kDeviceFaultsToSuspect = 3;

  // An input that ran successfully not long ago. When one input fails alone on two devices, the
  // canary decides: if it fails too, the device is broken; if not, the input is.
  static constexpr std::size_t kCanaryMaxBytes = 256;
  std::mutex canary_mu_;
  std::string canary_;                      // guarded by canary_mu_
  std::atomic<bool> have_canary_{false};

  // What the laggard verdict compares devices on (router_pick.cpp).
  static constexpr double kReferenceItems = 16;
  static constexpr double kReferenceBytes = 16 * 256;
  // A probe copies up to kReferenceItems requests of the batch it goes beside, within this many
  // input bytes (at least one request).
  static constexpr std::size_t kProbeMaxBytes = 64 * 1024;
  // A run this far past its prediction stalls its lane (stalled()): twice the prediction and a
  // few milliseconds, which a VM's scheduling alone does not add to a run.
  static constexpr double kStallFactor = 2.0;
  static constexpr std::int64_t kStallSlackNs = 3'000'000;
  // What the router knows of a device's speed beyond its fit: its evidence window, and probes.
  struct SpeedState {
    std::atomic<std::int64_t> window_opened_ns{0};
    std::atomic<std::uint64_t> window_runs{0};  // measured since, cold ones included
    std::atomic<std::int64_t> probed_ns{0};     // when the last probe was sent
    std::atomic<std::uint32_t> warming{0};      // its warm-up batches not yet released
  };
  std::vector<std::unique_ptr<SpeedState>> speed_;  // by device index
  // pool_speed()'s copy, any thread's to refresh (two refreshing at once compute the same).
  static constexpr std::int64_t kSpeedRefreshNs = 1'000'000;
  mutable std::atomic<std::int64_t> speed_due_ns_{0};
  mutable std::atomic<double> speed_fastest_ns_{0};
  mutable std::atomic<unsigned> speed_fastest_device_{0};
  mutable std::atomic<std::uint64_t> speed_laggards_{0};

  std::vector<std::unique_ptr<MemoryState>> memory_;  // by device index
  std::atomic<bool> memory_limited_{false};  // some device has a finite room: checks are due
  std::mutex held_mu_;
  std::vector<Batch*> held_;          // guarded by held_mu_: batches waiting for memory
  std::vector<Batch*> held_retry_;    // watchdog only: those being sent again

  std::mutex watchdog_mu_;
  std::condition_variable watchdog_cv_;
  bool stopping_ = false;  // guarded by watchdog_mu_
  // A pass is wanted now. Set without the lock (a kicker never waits for a pass to end); a kick
  // that races the watchdog's check is seen a period later at worst.
  std::atomic<bool> kicked_{false};
  std::atomic<bool> abandon_waiting_{false};
  std::thread watchdog_;
};

}  // namespace batchd

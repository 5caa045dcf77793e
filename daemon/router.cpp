#include "daemon/router.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <array>
#include <bit>
#include <limits>

#include "daemon/tsan_handoff.hpp"
#include "shm/clock.hpp"
#include "shm/futex.hpp"

namespace batchd {

Router::Router(Backend& backend, Completer& completer, RouterOptions options,
               std::function<void()> on_batch_freed, std::function<void()> on_tick)
    : backend_(backend), completer_(completer), options_(options),
      on_batch_freed_(std::move(on_batch_freed)), on_tick_(std::move(on_tick)) {
  const unsigned devices = backend_.devices();
  const unsigned streams = std::max(1U, backend_.streams_per_device());
  for (unsigned d = 0; d < devices; ++d) {
    health_.push_back(std::make_unique<DeviceHealth>());
    health_.back()->set_backoff(options_.backoff);
    cost_.push_back(std::make_unique<CostModel>());
    speed_.push_back(std::make_unique<SpeedState>());
    memory_.push_back(std::make_unique<MemoryState>());
    for (unsigned s = 0; s < streams; ++s) {
      lanes_.push_back(std::make_unique<Lane>());
      lanes_.back()->id = LaneId{d, s};
    }
  }
  const std::size_t total = lanes_.size() + options_.spare_batches;
  for (std::size_t i = 0; i < total; ++i) {
    batches_.push_back(std::make_unique<Batch>());
    free_.enqueue(batches_.back().get());
  }
  const std::int64_t now_ns = shm::monotonic_ns();
  for (unsigned d = 0; d < devices; ++d) open_window(d, now_ns);
  held_.reserve(total);
  held_retry_.reserve(total);
  refresh_memory();  // the first batches, and the first status published, see the memory too
  log_memory();
}

Router::~Router() {
  stop();
  if (group_) group_->leave(member_);
}

void Router::share_devices(std::shared_ptr<DeviceGroup> group) {
  group_device_.clear();
  for (unsigned d = 0; d < health_.size(); ++d) group_device_.push_back(backend_.device_in_group(d));
  member_ = group->join(group_device_);
  group_ = std::move(group);
}

DeviceGroup::Ticket Router::take_turn(const Lane& lane, double items, double bytes) noexcept {
  if (!group_) return {};
  const unsigned d = lane.id.device;
  const auto predicted = static_cast<std::int64_t>(predict_run_ns(d, items, bytes));
  DeviceGroup::Ticket turn = group_->acquire(member_, group_device_[d], predicted, device_timeout_ns(), leaving_group_);
  if (turn.waited_ns != 0 && counters_ != nullptr) {
    counters_->turns_waited.fetch_add(1, std::memory_order_relaxed);
    counters_->turn_wait_ns.fetch_add(static_cast<std::uint64_t>(turn.waited_ns), std::memory_order_relaxed);
  }
  return turn;
}

void Router::place_batches_in(const InputArena& arena) {
  for (std::size_t i = 0; i < batches_.size() && i < arena.slots(); ++i) batches_[i]->place_in(arena.slot(i));
}

void Router::start() {
  // The devices present now warm up before they take requests; a worker's, when it attaches
  // (open_device).
  for (unsigned d = 0; d < health_.size(); ++d) {
    if (health_[d]->present()) send_warmup(d, make_warmup(d));
  }
  for (auto& lane : lanes_) {
    Lane* l = lane.get();
    l->worker = std::thread([this, l] { worker(*l); });
  }
  watchdog_ = std::thread([this] { watchdog(); });
}

void Router::stop() noexcept {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard lock(watchdog_mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_.join();
  leaving_group_.store(true, std::memory_order_release);  // a lane waiting for a turn runs at once
  if (group_) group_->wake_all();
  backend_.shutdown();  // a hung run returns so its worker can exit
  for (auto& lane : lanes_) lane->queue.enqueue(nullptr);
  for (auto& lane : lanes_) {
    if (lane->worker.joinable()) lane->worker.join();
  }
}

Batch* Router::try_acquire() noexcept {
  Batch* batch = nullptr;
  if (!free_.try_dequeue(batch)) return nullptr;
  handoff_acquire(batch);
  in_use_.fetch_add(1, std::memory_order_relaxed);
  return batch;
}

Batch* Router::acquire_extra() {
  if (Batch* batch = try_acquire()) return batch;
  // Splits and re-runs of hung batches need objects beyond the pool; they are rare, and the
  // pool keeps them afterwards.
  std::lock_guard lock(batches_mu_);
  batches_.push_back(std::make_unique<Batch>());
  in_use_.fetch_add(1, std::memory_order_relaxed);
  return batches_.back().get();
}

void Router::release(Batch* batch) noexcept {
  finish_warmup(*batch);
  batch->clear();
  handoff_release(batch);
  free_.enqueue(batch);
  in_use_.fetch_sub(1, std::memory_order_seq_cst);  // ordered before the sleeping-flag check
  on_batch_freed_();
}

void Router::record_success(unsigned device, const Batch& batch, std::int64_t run_ns,
                            std::int64_t now_ns) noexcept {
  // A window's cold first runs say how the device starts, not how fast it is (laggard_verdict.hpp);
  // a warm-up's are there to be paid, and its measured batch time starts after them too.
  const bool cold = speed_[device]->window_runs.fetch_add(1, std::memory_order_relaxed) < LaggardVerdict::kColdBatches;
  if (!cold || batch.warms_device == Batch::kNoWarmup) {
    health_[device]->record_success(batch.size(), run_ns, now_ns, batch.shadow);
  }
  if (!cold) cost_[device]->record(batch.size(), batch.input_bytes.size(), run_ns);
  if (latency_ != nullptr && !batch.shadow) record_latency(device, batch, now_ns - run_ns, run_ns);
}

void Router::record_latency(unsigned device, const Batch& batch, std::int64_t started_ns,
                            std::int64_t run_ns) noexcept {
  if (devices_on_page_ && device < latency_->compute_by_device.size()) {
    latency_->compute_by_device[device].record(run_ns);
  }
  // Counted here first, then added once per bucket used: a batch's requests share few buckets,
  // and lanes finishing at once would otherwise contend on the same lines request by request.
  std::array<std::array<std::uint32_t, shm::kLatencyBuckets>, shm::kWirePriorities> counts{};
  std::array<std::uint64_t, shm::kWirePriorities> sums{};
  for (const RequestRef& request : batch.requests) {
    const std::int64_t waited_ns = std::max<std::int64_t>(started_ns - request.arrival_ns, 0);
    const auto c = static_cast<std::size_t>(request.priority);
    ++counts[c][LatencyHistogram::bucket_of(waited_ns)];
    sums[c] += static_cast<std::uint64_t>(waited_ns);
  }
  const auto add = [&](std::size_t c, LatencyHistogram& histogram) {
    for (std::size_t b = 0; b < shm::kLatencyBuckets; ++b) {
      if (counts[c][b] != 0) histogram.buckets[b].fetch_add(counts[c][b], std::memory_order_relaxed);
    }
    if (sums[c] != 0) histogram.sum_ns.fetch_add(sums[c], std::memory_order_relaxed);
  };
  for (std::size_t c = 0; c < counts.size(); ++c) {
    add(c, latency_->queue_by_class[c]);
    if (counters_ != nullptr) add(c, counters_->queue_by_class[c]);
  }
  if (counters_ == nullptr) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  const std::uint64_t queued_ns = std::accumulate(sums.begin(), sums.end(), std::uint64_t{0});
  const std::uint64_t computed_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(run_ns, 0)) * batch.size();
  counters_->batches.fetch_add(1, relaxed);
  counters_->inferences.fetch_add(batch.size(), relaxed);
  counters_->queue_ns.fetch_add(queued_ns, relaxed);
  counters_->compute_ns.fetch_add(computed_ns, relaxed);
}

bool Router::any_available_outside(std::uint64_t mask, std::int64_t now_ns) const noexcept {
  for (unsigned d = 0; d < health_.size(); ++d) {
    if ((mask & device_bit(d)) == 0 && health_[d]->available(now_ns)) return true;
  }
  return false;
}

void Router::fail_unavailable(Batch* batch) noexcept {
  if ((options_.wait_for_devices || warming()) && !abandon_waiting_.load(std::memory_order_acquire)) {
    hold_for_device(batch, shm::monotonic_ns());
    return;
  }
  // The status page says so before any caller hears it: a /readyz read right after this answer
  // must not see the device count of the last tick.
  on_tick_();
  if (all_devices_lost()) {
    // The daemon exits for a restart (Daemon::run): unanswered, the requests stay with their
    // clients, which send them again to the next daemon instead of failing their callers.
    release(batch);
    return;
  }
  char message[160];
  const auto n = fmt::format_to_n(message, sizeof(message) - 1,
                                  "backend unavailable: none of the {} {} devices is healthy; "
                                  "retry later",
                                  health_.size(), backend_.name());
  completer_.complete_batch_with(*batch, shm::WireStatus::kBackendUnavailable,
                                 std::string_view(message, std::min(n.size, sizeof(message) - 1)));
  release(batch);
}

void Router::dispatch(Batch* batch) noexcept {
  // A probe goes only where it was sent: redirected (its device failed or went away), it is
  // dropped, as its answer is not wanted.
  if (batch->shadow) {
    release(batch);
    return;
  }
  const std::int64_t now_ns = shm::monotonic_ns();
  for (;;) {
    bool memory_short = false;
    Lane* lane = pick_lane(*batch, now_ns, &memory_short);
    if (lane == nullptr) {
      memory_short ? hold_for_memory(batch, now_ns) : fail_unavailable(batch);
      return;
    }
    DeviceHealth& h = *health_[lane->id.device];
    // A device back from its back-off takes one probe batch at a time; losing that race just
    // means looking again.
    if (h.state() != DeviceState::kHealthy && !h.try_begin_probe(now_ns)) continue;
    probe_laggards(*batch, now_ns);  // before the enqueue: the batch is the lane's after it
    enqueue_on(*lane, batch);
    return;
  }
}

void Router::enqueue_on(Lane& lane, Batch* batch) noexcept {
  DeviceHealth& h = *health_[lane.id.device];
  batch->run_token += 1;
  batch->run_state.store(make_run_state(batch->run_token, RunPhase::kQueued), std::memory_order_relaxed);
  lane.outstanding.fetch_add(1, std::memory_order_relaxed);
  lane.outstanding_items.fetch_add(batch->size(), std::memory_order_relaxed);
  h.outstanding_items.fetch_add(batch->size(), std::memory_order_relaxed);
  h.outstanding_batches.fetch_add(1, std::memory_order_relaxed);
  handoff_release(batch);
  lane.queue.enqueue(batch);
}

std::uint64_t Router::inline_budget_ns() const noexcept {
  if (!backend_.runs_inline()) return 0;
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.inline_run_max).count());
}

bool Router::runs_inline_on(const DeviceHealth& h, std::size_t items, std::int64_t now_ns) const noexcept {
  // Unmeasured (or stale) runs go to a worker once, which measures them; so do probes.
  const std::uint64_t item_ns = h.item_ns_estimate(now_ns);
  return h.state() == DeviceState::kHealthy && item_ns != 0 && item_ns * items <= inline_budget_ns();
}

Router::Lane* Router::inline_lane(const Batch& batch, std::int64_t now_ns) noexcept {
  if (inline_budget_ns() == 0) return nullptr;
  Lane* lane = pick_lane(batch, now_ns);
  if (lane == nullptr) return nullptr;
  return runs_inline_on(*health_[lane->id.device], batch.size(), now_ns) ? lane : nullptr;
}

bool Router::would_run_inline(std::uint32_t items, std::int64_t now_ns) const noexcept {
  if (inline_budget_ns() == 0) return false;
  return std::any_of(health_.begin(), health_.end(), [&](const auto& h) { return runs_inline_on(*h, items, now_ns); });
}

BackendStatus Router::run_guarded(LaneId lane, const BatchInput& in, BatchOutput& out) noexcept {
  try {
    return backend_.run(lane, in, out);
  } catch (const std::exception& e) {
    return BackendStatus::failure(e.what());
  } catch (...) {
    return BackendStatus::failure("the backend threw a non-standard exception");
  }
}

void Router::run_or_dispatch(Batch* batch) noexcept {
  const std::int64_t started_ns = shm::monotonic_ns();
  Lane* lane = inline_lane(*batch, started_ns);
  if (lane == nullptr) {
    dispatch(batch);
    return;
  }
  probe_laggards(*batch, started_ns);
  batch->run_started_ns = started_ns;
  batch->run_device = lane->id.device;
  BackendStatus status = run_guarded(lane->id, batch->input(), batch->output);
  if (!status.ok) {
    on_failure(*lane, batch, std::move(status.message));
    return;
  }
  const std::int64_t now_ns = shm::monotonic_ns();
  health_[lane->id.device]->record_inline();
  complete_success(lane->id.device, batch, status, now_ns - started_ns, now_ns);
}

void Router::worker(Lane& lane) noexcept {
  for (;;) {
    Batch* batch = nullptr;
    lane.queue.wait_dequeue(batch);
    if (batch == nullptr) return;
    handoff_acquire(batch);
    // Before the run starts: the hang timeout and the cost fit count the run, not the turn.
    const DeviceGroup::Ticket turn =
        take_turn(lane, static_cast<double>(batch->size()), static_cast<double>(batch->input_bytes.size()));
    if (!fits_at_launch(lane, *batch)) {
      if (group_) group_->release(member_, turn);
      unqueue(lane, *batch);
      hold_for_memory(batch, shm::monotonic_ns());
      continue;
    }
    const std::uint64_t token = batch->run_token;
    batch->run_state.store(make_run_state(token, RunPhase::kRunning), std::memory_order_release);
    lane.running_items.store(batch->size(), std::memory_order_relaxed);
    lane.predicted_ns.store(static_cast<std::int64_t>(predict_run_ns(lane.id.device, static_cast<double>(batch->size()),
                                                                     static_cast<double>(batch->input_bytes.size()))),
                            std::memory_order_relaxed);
    batch->run_started_ns = shm::monotonic_ns();
    batch->run_device = lane.id.device;
    lane.started_ns.store(batch->run_started_ns, std::memory_order_relaxed);
    lane.running_token.store(token, std::memory_order_relaxed);
    lane.running.store(batch, std::memory_order_release);
    const std::uint64_t incarnation = health_[lane.id.device]->incarnation();
    BackendStatus status = run_guarded(lane.id, batch->input(), batch->output);
    lane.running.store(nullptr, std::memory_order_release);
    if (group_) group_->release(member_, turn);
    if (!status.ok && status.device_fault) {
      rerun_after_device_fault(lane, incarnation, batch, std::move(status.message));
      continue;
    }
    finish(lane, batch, std::move(status));
  }
}

bool Router::settle(Lane& lane, Batch* batch) noexcept {
  DeviceHealth& h = *health_[lane.id.device];
  // seq_cst, as is lane_view()'s read: a drain loop that saw this lane busy and went to sleep is
  // rung awake by release() (on_batch_freed), which follows this store.
  lane.outstanding.fetch_sub(1, std::memory_order_seq_cst);
  lane.outstanding_items.fetch_sub(batch->size(), std::memory_order_relaxed);
  h.outstanding_items.fetch_sub(batch->size(), std::memory_order_relaxed);
  h.outstanding_batches.fetch_sub(1, std::memory_order_relaxed);
  std::uint64_t running = make_run_state(batch->run_token, RunPhase::kRunning);
  if (!batch->run_state.compare_exchange_strong(
          running, make_run_state(batch->run_token, RunPhase::kFinished), std::memory_order_acq_rel)) {
    // The watchdog gave up on this run and sends a copy elsewhere: drop the late result.
    lane.stuck.store(false, std::memory_order_release);
    let_go_of_abandoned(batch);
    return false;
  }
  return true;
}

void Router::finish(Lane& lane, Batch* batch, BackendStatus status) noexcept {
  const unsigned device = lane.id.device;
  if (!settle(lane, batch)) return;
  if (status.ok) {
    const std::int64_t now_ns = shm::monotonic_ns();
    const std::int64_t run_ns = now_ns - lane.started_ns.load(std::memory_order_relaxed);
    if (batch->shadow) {
      // A warm-up's run says how the device starts; the cost fit takes it past the cold ones.
      if (batch->warms_device == Batch::kNoWarmup) learn_from_probe(device, *batch, run_ns);
      record_success(device, *batch, run_ns, now_ns);
      release(batch);  // the original was answered elsewhere
      return;
    }
    complete_success(device, batch, status, run_ns, now_ns);
    return;
  }
  on_failure(lane, batch, std::move(status.message));
}

void Router::complete_success(unsigned device, Batch* batch, const BackendStatus& status, std::int64_t run_ns,
                              std::int64_t now_ns) noexcept {
  record_success(device, *batch, run_ns, now_ns);
  // Devices that failed this same batch are proven at fault: it runs fine here.
  for (unsigned d = 0; d < health_.size(); ++d) {
    if ((batch->failed_devices & device_bit(d)) != 0) health_[d]->mark_unhealthy(now_ns);
  }
  remember_canary(*batch);
  completer_.complete_batch(*batch, status);
  release(batch);
}

void Router::remember_canary(const Batch& batch) noexcept {
  if (have_canary_.load(std::memory_order_relaxed) || batch.size() == 0) return;
  const BatchInput in = batch.input();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in.at(i).size() <= kCanaryMaxBytes) {
      std::lock_guard lock(canary_mu_);
      canary_.assign(in.at(i));
      have_canary_.store(true, std::memory_order_release);
      return;
    }
  }
}

Router::Verdict Router::check_with_canary(Lane& lane) noexcept {
  if (!have_canary_.load(std::memory_order_acquire)) return Verdict::kUnknown;
  std::string input;
  {
    std::lock_guard lock(canary_mu_);
    input = canary_;
  }
  const std::uint32_t offsets[2] = {0, static_cast<std::uint32_t>(input.size())};
  thread_local BatchOutput out;
  const DeviceGroup::Ticket turn = take_turn(lane, 1, static_cast<double>(input.size()));
  const BackendStatus status = run_guarded(lane.id, BatchInput{input, offsets}, out);
  if (group_) group_->release(member_, turn);
  return status.ok && out.size() == 1 ? Verdict::kInputFails : Verdict::kDeviceBroken;
}

void Router::note_if_lost(unsigned device) noexcept {
  if (!backend_.device_lost(device) || !health_[device]->mark_lost()) return;
  const std::size_t lost = lost_devices_.fetch_add(1, std::memory_order_acq_rel) + 1;
  spdlog::error("{} device {} is lost (a sticky error: only a new process can use it); {} of {} "
                "devices lost{}",
                backend_.name(), device, lost, health_.size(),
                lost == health_.size() ? ": exiting for a restart" : "");
}

void Router::on_failure(Lane& lane, Batch* batch, std::string message) noexcept {
  const unsigned device = lane.id.device;
  const std::int64_t now_ns = shm::monotonic_ns();
  note_if_lost(device);
  const bool blind = !have_canary_.load(std::memory_order_acquire);
  if (health_[device]->record_failure(now_ns, blind)) {
    spdlog::warn("{} device {} marked unhealthy after failures: {}", backend_.name(), device, message);
  }
  if (batch->shadow) {  // a probe's failure tells about the device only
    release(batch);
    return;
  }
  batch->failed_devices |= device_bit(device);
  batch->last_error = std::move(message);
  // Once on another device, then split: a batch failing on two devices is failing on its input.
  // Runs past the hang timeout do not count toward the two: a hung device and one that fails now
  // and then are two devices' faults (the hung one runs no canary), and blaming a lone input for
  // them answered a good request with an error (the router test's flood, now and then).
  const std::uint64_t errored = batch->failed_devices & ~batch->hung_devices;
  if (std::popcount(errored) < 2 && any_available_outside(batch->failed_devices, now_ns)) {
    dispatch(batch);
    return;
  }
  if (batch->size() > 1) {
    Batch* half = acquire_extra();
    batch->split_into(*half);
    batch->failed_devices = batch->hung_devices = 0;
    dispatch(batch);
    dispatch(half);
    return;
  }
  switch (check_with_canary(lane)) {
    case Verdict::kInputFails:
      // The devices still run a known-good input: their failures were this input's fault (not
      // a hang: no canary ran there).
      for (unsigned d = 0; d < health_.size(); ++d) {
        if ((errored & device_bit(d)) != 0) health_[d]->forgive();
      }
      complete_single_failure(batch, device, true);
      return;
    case Verdict::kUnknown:
      complete_single_failure(batch, device, false);
      return;
    case Verdict::kDeviceBroken:
      spdlog::warn("{} device {} fails a known-good input too: marked unhealthy", backend_.name(),
                   device);
      health_[device]->mark_unhealthy(now_ns);
      // The input's guilt is unproven: another device may still run it; if none can, the backend
      // as a whole is unavailable.
      if (any_available_outside(batch->failed_devices, now_ns)) {
        dispatch(batch);
      } else {
        fail_unavailable(batch);
      }
      return;
  }
}

void Router::complete_single_failure(Batch* batch, unsigned device, bool proven) noexcept {
  completer_.complete_batch(*batch, BackendStatus::failure(batch->last_error));
  // Recorded after the caller has its answer: the record hashes the input.
  if (dead_letters_ != nullptr && batch->size() == 1) {
    const RequestRef& request = batch->requests.front();
    const ClientSession& session = *request.session;
    dead_letters_->record(DeadLetterFacts{
        .model = dead_letter_model_,
        .input = batch->input().at(0),
        .error = batch->last_error,
        .device = device,
        .devices_tried = batch->failed_devices | device_bit(device),
        .proven = proven,
        .client_id = session.id(),
        .pid = session.pid(),
        .uid = session.uid(),
        .request_id = request.request_id,
        .slot = request.slot,
        .generation = request.generation,
    });
  }
  release(batch);
}

}  // namespace batchd

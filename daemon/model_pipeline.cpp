// One model's drain-and-batch path: admit each request the drain loop took for it or reject it at
// once (withdrawn, expired, or bound to miss its deadline behind the backlog), copy the admitted
// into the open batch, and hand full or due batches to its router.
#include "daemon/model_pipeline.hpp"

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "shm/clock.hpp"

namespace batchd {

namespace {

// A safety net only: a worker that frees a batch rings the doorbell when the drain loop sleeps.
constexpr std::int64_t kPoolPollNs = 1'000'000;

}  // namespace

void ModelPipeline::reject(const PendingRequest& request, shm::WireStatus status, const char* why) {
  RequestRef ref{request.session, request.taken.slot, request.taken.generation, request.taken.deadline_mono_ns};
  ref.model = id_;
  ref.arrival_ns = request.arrival_ns;
  ref.request_id = request.taken.request_id;
  // Only a caller's own trace follows a refusal: the sampler picks among requests that run.
  if (hooks_.tracer != nullptr && request.taken.trace.valid()) {
    ref.trace = request.taken.trace;
    hooks_.tracer->decide(ref.trace);
  }
  completer_.reject(ref, status, why);
}

bool ModelPipeline::rejected_as_gone(const PendingRequest& request, std::int64_t now_ns, const char* late_why) {
  const TakenRequest& taken = request.taken;
  const shm::RequestSlotHeader& header = *request.session->view().request_slot(taken.slot);
  if (header.cancel_generation.load(std::memory_order_relaxed) == taken.generation) {
    reject(request, shm::WireStatus::kCancelled, "request withdrawn by the client");
    return true;
  }
  if (taken.deadline_mono_ns != 0 && taken.deadline_mono_ns <= now_ns) {
    reject(request, shm::WireStatus::kTimeout, late_why);
    return true;
  }
  return false;
}

bool ModelPipeline::admit(PendingRequest request, std::int64_t now_ns) {
  if (const Lifecycle now = lifecycle(); now == Lifecycle::kRemoved) {
    reject(request, shm::WireStatus::kUnknownModel,
           ("model " + config_.name + " was removed from the daemon's config (a reload)").c_str());
    return false;
  } else if (now != Lifecycle::kLoaded) {
    const std::string why = "model " + config_.name +
                            (now == Lifecycle::kUnloading ? " is unloading"
                             : now == Lifecycle::kLoading ? " is loading"
                                                          : " is unloaded") +
                            ": load it to serve it (batchctl load, POST /v2/repository/models/NAME/load)";
    reject(request, shm::WireStatus::kBackendUnavailable, why.c_str());
    return false;
  }
  if (rejected_as_gone(request, now_ns, "deadline passed before the daemon took the request")) return false;
  const TakenRequest& taken = request.taken;
  if (taken.deadline_mono_ns != 0 && would_miss_deadline(taken, now_ns)) {
    stats_.requests_shed_by_class[static_cast<std::size_t>(taken.priority)].fetch_add(1, std::memory_order_relaxed);
    reject(request, shm::WireStatus::kOverloaded,
           "overloaded: the daemon's backlog would outlast this request's deadline; retry later");
    return false;
  }
  pending_.push_back(std::move(request));
  return true;
}

void ModelPipeline::note_taken(shm::WirePriority priority, std::uint64_t bytes) noexcept {
  arrivals_.note(priority, bytes);
}

void ModelPipeline::end_pass(std::int64_t now_ns, bool backlog) noexcept {
  drain_backlog_ = backlog;
  const std::uint64_t taken = arrivals_.end_pass(now_ns);
  // Once a pass, not once a request; only this thread writes it.
  if (taken > 0) taken_.store(taken_.load(std::memory_order_relaxed) + taken, std::memory_order_relaxed);
  admission_.new_pass();
}

bool ModelPipeline::would_miss_deadline(const TakenRequest& taken, std::int64_t now_ns) {
  if (!admission_.looked()) admission_.look(router_->delay_view(now_ns), arrivals_, now_ns);
  Admission::Backlog backlog;
  for (std::size_t r = 0; r < PendingQueue::kClasses; ++r) backlog.waiting_by_rank[r] = pending_.size_of_rank(r);
  backlog.in_open_batch = batcher_.count();
  return admission_.would_miss_deadline(shm::rank_of(taken.priority), taken.deadline_mono_ns, now_ns, backlog,
                                        config_.settings);
}

bool ModelPipeline::move_into_batch(PendingRequest& request, std::int64_t now_ns) {
  Batch& batch = *open_;
  const TakenRequest& taken = request.taken;
  // Still withdrawable while it waited: only a batch makes a request claimed.
  if (rejected_as_gone(request, now_ns, "deadline passed before the request was batched")) return false;
  // Copy first, check the copy: the client may still be scribbling on its slot. The copy is the
  // batch's input itself (a worker process reads it in place, daemon/input_arena.hpp).
  char* to = batch.input_bytes.grow_by(taken.input_bytes);
  if (taken.input_bytes > 0) std::memcpy(to, taken.input, taken.input_bytes);
  if (!simdjson::validate_utf8(to, taken.input_bytes)) {
    batch.input_bytes.truncate(batch.input_bytes.size() - taken.input_bytes);
    reject(request, shm::WireStatus::kInvalidUtf8, "input is not valid UTF-8");
    return false;
  }
  RequestRef ref{request.session, taken.slot, taken.generation, taken.deadline_mono_ns, taken.request_id,
                 request.arrival_ns, taken.priority, id_, taken.cache_scope};
  if (hooks_.tracer != nullptr) {
    ref.trace = taken.trace;
    hooks_.tracer->decide(ref.trace);
  }
  if (answered_without_running(ref, std::string_view(to, taken.input_bytes))) {
    batch.input_bytes.truncate(batch.input_bytes.size() - taken.input_bytes);
    return false;
  }
  if (batch.requests.empty()) batch.opened_ns = request.arrival_ns;
  batch.input_offsets.push_back(static_cast<std::uint32_t>(batch.input_bytes.size()));
  shares_.add(request.session->uid(), shm::rank_of(taken.priority), taken.input_bytes);
  batch.requests.push_back(std::move(ref));
  batcher_.add(taken.input_bytes, WaitOrFullBatcher::at_ns(request.arrival_ns), taken.deadline_mono_ns);
  return true;
}

bool ModelPipeline::answered_without_running(RequestRef& ref, std::string_view input) {
  const shm::CacheWriter* cache = completer_.caches().segment_for(*ref.session, id_);
  if (cache != nullptr && (ref.cache_epoch = cache->reader().epoch(id_)) != 0) {
    // Its client looked before it sent it; the answer may have landed since.
    ModelCounters& counters = stats_.by_model[id_];
    const std::int64_t start_ns = shm::monotonic_ns();
    const shm::CacheKey key{id_, ref.cache_epoch, ref.cache_scope};
    ref.cache_hash = shm::cache_hash(cache->reader().header(), key, input);
    const bool hit = cache->reader().lookup(key, ref.cache_hash, input, cache_answer_);
    const auto took_ns = static_cast<std::uint64_t>(shm::monotonic_ns() - start_ns);
    (hit ? counters.cache_hits : counters.cache_misses).fetch_add(1, std::memory_order_relaxed);
    (hit ? counters.cache_hit_ns : counters.cache_miss_ns).fetch_add(took_ns, std::memory_order_relaxed);
    if (hit) {
      completer_.complete_one(ref, shm::WireStatus::kOk, cache_answer_);
      return true;
    }
  }
  if (!config_.settings.coalesces()) return false;
  ref.coalescer = &coalescer_;
  try {
    const std::uint64_t hash = ref.cache_epoch != 0 ? ref.cache_hash : std::hash<std::string_view>{}(input);
    return coalescer_.follow_or_lead(hash, input, ref);
  } catch (const std::exception&) {
    ref.coalescer = nullptr;  // out of memory: it runs on its own
    return false;
  }
}

bool ModelPipeline::cut_for_fairness(const PendingRequest& request, std::int64_t now_ns) noexcept {
  const uid_t tenant = request.session->uid();
  const std::size_t cls = shm::rank_of(request.taken.priority);
  const std::uint32_t slice_us = config_.settings.fair_slice_us;
  if (slice_us == 0 || !shares_.holds_other_than(tenant, cls)) return false;
  const CostFit& cost = pass_lanes(now_ns).cost;
  if (!cost.fitted) return false;
  // A device whose every batch costs more than the slice still batches: the least run a cut
  // leaves is then twice its fixed cost, so at least half of each run is the requests' own work.
  const double least_ns = std::max(static_cast<double>(slice_us) * 1e3, 2 * cost.fixed_ns);
  return shares_.would_double_anothers(tenant, cls, request.taken.input_bytes, cost, least_ns);
}

bool ModelPipeline::fill_batches(std::int64_t now_ns) {
  if (router_ == nullptr) return false;  // unloaded: nothing waits
  bool progressed = false;
  pass_lanes_.reset();
  const std::int64_t urgent_ns = pending_.empty() ? 0 : urgent_ns_before_deadline(now_ns);
  std::uint32_t take = 0;  // what the open batch takes of those waiting (0: not yet asked)
  batcher_.cap_bytes(router_->byte_budget(now_ns));  // device memory (router_memory.cpp)
  while (!pending_.empty()) {
    if (open_ == nullptr && (open_ = router_->try_acquire()) == nullptr) break;
    // While the open batch is held for a lane, the rest wait here, in class order, until a lane
    // frees: a batch filled now would fix its members in arrival order, and a high-priority
    // request arriving meanwhile would wait behind them.
    if (batcher_.count() > 0 && holding_for_lane(pass_lanes(now_ns))) break;
    if (take == 0 && batcher_.count() > 0) take = take_limit(now_ns);
    if (take != 0 && batcher_.count() >= take) {
      flush_open_batch(FlushReason::kTarget);
      take = 0;
      continue;
    }
    PendingRequest& request = pending_.front(now_ns, urgent_ns);
    if (!batcher_.fits(request.taken.input_bytes) || cut_for_fairness(request, now_ns)) {
      batcher_.mark_full();
      flush_open_batch(FlushReason::kFull);
      continue;  // the same request goes into the next batch
    }
    move_into_batch(request, now_ns);
    pending_.pop_front();
    progressed = true;
    if (batcher_.count() >= batcher_.limits().max_batch) flush_open_batch(FlushReason::kFull);
  }
  // Checked once the batch holds all it can: a request that waited for a batch object does not
  // make a batch of one.
  if (const FlushDecision decision = decide_flush(now_ns); decision.flush()) flush_open_batch(decision.reason);
  return progressed;
}

std::uint32_t ModelPipeline::take_limit(std::int64_t now_ns) noexcept {
  const Router::LaneView& lanes = pass_lanes(now_ns);
  // The policy's own first test, before the view (the rates) is worked out: the cpu backend's
  // passes never get further.
  if (config_.settings.batch.policy != PolicyKind::kAdaptive ||
      lanes.cost.fixed_ns < BatchPolicy::kTakeLimitMinFixedNs) {
    return batcher_.limits().max_batch;
  }
  const OpenBatchState waiting{static_cast<std::uint32_t>(std::min<std::size_t>(
                                   batcher_.count() + pending_.size(), UINT32_MAX)),
                               0, false, batcher_.oldest_ns(), 0};
  return policy_.take_limit(waiting, policy_view(lanes, now_ns), now_ns);
}

std::int64_t ModelPipeline::urgent_ns_before_deadline(std::int64_t now_ns) noexcept {
  // A request this close to its deadline must join the next batch: that batch's run (at most a
  // full one) and a margin. Admission already counted the higher classes that would pass it, so
  // this is the exception (the estimate was wrong), not the way lower classes get served.
  const Router::LaneView& lanes = pass_lanes(now_ns);
  const double full_batch_ns =
      lanes.cost.fitted ? lanes.cost.predict_ns(config_.settings.batch.max_batch, 0) : 0;
  return static_cast<std::int64_t>(full_batch_ns) + BatchPolicy::kDeadlineMarginNs;
}

const Router::LaneView& ModelPipeline::pass_lanes(std::int64_t now_ns) noexcept {
  if (!pass_lanes_) pass_lanes_ = router_->lane_view(now_ns);
  return *pass_lanes_;
}

PolicyView ModelPipeline::policy_view(const Router::LaneView& lanes, std::int64_t now_ns) const noexcept {
  PolicyView view;
  view.lanes = lanes.lanes;
  view.idle_lanes = lanes.idle_lanes;
  view.cost = lanes.cost;
  view.last_batch_end_ns = lanes.last_batch_end_ns;
  view.drain_backlog = drain_backlog_;
  view.runs_on_drain_thread =
      drain_backlog_ &&
      router_->would_run_inline(std::min(BatchPolicy::kBacklogFill, config_.settings.batch.max_batch), now_ns);
  view.arrivals_per_s = arrivals_.per_second(now_ns);
  const double bytes_per_s = arrivals_.bytes_per_second(now_ns);
  view.mean_input_bytes = view.arrivals_per_s > 0 ? bytes_per_s / view.arrivals_per_s : 0;
  return view;
}

void ModelPipeline::refresh_policy_stats(std::int64_t now_ns) noexcept {
  if (router_ == nullptr || now_ns < next_policy_stats_ns_) return;
  next_policy_stats_ns_ = now_ns + kPolicyStatsPeriodNs;
  constexpr auto relaxed = std::memory_order_relaxed;
  const PolicyView view = policy_view(router_->lane_view(now_ns), now_ns);
  const BatchLimits& batch = config_.settings.batch;
  const std::uint32_t target = static_cast<std::uint32_t>(
      batch.policy == PolicyKind::kAdaptive ? policy_.target_batch(view) : batch.max_batch);
  ModelCounters& mine = stats_.by_model[id_];
  mine.arrivals_per_s.store(static_cast<std::uint64_t>(view.arrivals_per_s), relaxed);
  mine.target_batch.store(target, relaxed);
  // The status page's own policy figures are the default model's.
  if (id_ != 0) return;
  stats_.arrivals_per_s.store(static_cast<std::uint64_t>(view.arrivals_per_s), relaxed);
  for (std::uint32_t c = 0; c < shm::kWirePriorities; ++c) {
    stats_.arrivals_per_s_by_class[c].store(
        static_cast<std::uint64_t>(arrivals_.per_second(static_cast<shm::WirePriority>(c), now_ns)), relaxed);
  }
  stats_.target_batch.store(target, relaxed);
}

bool ModelPipeline::holding_for_lane(const Router::LaneView& lanes) const noexcept {
  if (config_.settings.batch.policy != PolicyKind::kAdaptive || stopping_) return false;
  return lanes.lanes > 0 && lanes.idle_lanes == 0;
}

FlushDecision ModelPipeline::decide_flush(std::int64_t now_ns) {
  recheck_ns_ = 0;
  held_for_lane_ = false;
  if (batcher_.count() == 0) return {};
  const OpenBatchState state{batcher_.count(), batcher_.bytes(), batcher_.full(), batcher_.oldest_ns(),
                             batcher_.earliest_deadline_ns()};
  const PolicyView view =
      config_.settings.batch.policy == PolicyKind::kAdaptive ? policy_view(pass_lanes(now_ns), now_ns) : PolicyView{};
  const FlushDecision decision = policy_.decide(state, view, now_ns);
  if (!decision.flush()) recheck_ns_ = decision.recheck_ns;
  held_for_lane_ = !decision.flush() && view.lanes > 0 && view.idle_lanes == 0;
  return decision;
}

void ModelPipeline::flush_open_batch(FlushReason reason) {
  if (open_ == nullptr || open_->requests.empty()) return;
  if (spdlog::should_log(spdlog::level::trace)) trace_flush(reason);
  stats_.flushes[static_cast<std::size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  stats_.by_model[id_].flushes[static_cast<std::size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  open_->id = next_batch_id_++;
  router_->run_or_dispatch(open_);
  pass_lanes_.reset();  // a lane took it
  open_ = nullptr;
  batcher_.reset();
  shares_.clear();
}

void ModelPipeline::trace_flush(FlushReason reason) {
  // The decision sequence through a burst, to read against another policy's (docs/POLICY.md).
  const std::int64_t now_ns = shm::monotonic_ns();
  const PolicyView view = policy_view(router_->lane_view(now_ns), now_ns);
  spdlog::trace("flush model {} at {} us: {} requests, {} ({} us after the oldest), {} waiting; lanes {}/{} idle, "
                "{:.0f} arrivals/s, target {}",
                id_, now_ns / 1000, batcher_.count(), flush_reason_name(reason), (now_ns - batcher_.oldest_ns()) / 1000,
                pending_.size(), view.idle_lanes, view.lanes, view.arrivals_per_s, policy_.target_batch(view));
}

bool ModelPipeline::work_waiting() {
  // The open batch was held because every lane was busy, and one has freed since: its worker's
  // doorbell may have come before the drain loop said it sleeps, so look rather than wait for it.
  if (router_ == nullptr) return false;
  if (held_for_lane_ && !holding_for_lane(router_->lane_view(shm::monotonic_ns()))) return true;
  if (pending_.empty()) return false;
  if (open_ != nullptr && batcher_.count() > 0 && holding_for_lane(router_->lane_view(shm::monotonic_ns()))) {
    return false;  // a lane's worker rings the doorbell when it frees
  }
  return open_ != nullptr || (open_ = router_->try_acquire()) != nullptr;
}

std::int64_t ModelPipeline::sleep_bound_ns(std::int64_t now_ns) const noexcept {
  if (recheck_ns_ != 0) return std::max<std::int64_t>(0, recheck_ns_ - now_ns);  // the open batch is held until then
  if (!pending_.empty() && open_ == nullptr) return kPoolPollNs;  // every batch busy: a net under the doorbell
  return -1;
}

void ModelPipeline::update_limits(const BatchLimits& limits) {
  {
    std::lock_guard lock(limits_mu_);
    pending_limits_ = limits;
  }
  limits_changed_.store(true, std::memory_order_release);
}

bool ModelPipeline::apply_pending_limits() {
  if (!limits_changed_.exchange(false, std::memory_order_acq_rel)) return false;
  std::lock_guard lock(limits_mu_);
  BatchLimits& batch = config_.settings.batch;
  // Fitted here, on the drain thread, where the backend cannot go away meanwhile; an unloaded
  // model's are fitted when it loads.
  batch = backend_ != nullptr ? fit_to_backend(pending_limits_, "reload") : pending_limits_;
  batcher_.set_limits(batch);
  policy_.set_limits(batch);
  recheck_ns_ = 0;
  spdlog::info("model {}: batching policy now {}, max batch {}, max wait {} us, max batch bytes {}", config_.name,
               policy_name(batch.policy), batch.max_batch,
               std::chrono::duration_cast<std::chrono::microseconds>(batch.max_wait).count(), batch.max_batch_bytes);
  return true;
}

bool ModelPipeline::stopping_done() {
  if (router_ == nullptr) return pending_.empty();
  // Whatever is open runs now rather than waiting out its window.
  flush_open_batch(FlushReason::kStopping);
  if (open_ != nullptr && open_->requests.empty()) {
    router_->release(open_);
    open_ = nullptr;
  }
  return pending_.empty() && router_->idle();
}

}  // namespace batchd

// The drain-and-batch path: take requests from the clients' rings in turn, admit each or reject it
// at once (withdrawn, expired, or bound to miss its deadline behind the backlog), copy the
// admitted into the open batch, and hand full or due batches to the router.
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <optional>

#include "daemon/daemon.hpp"

namespace batchd {

namespace {

// Requests taken from one client before moving to the next, so one busy client cannot starve
// the others within a drain pass.
constexpr unsigned kBurstPerClient = 32;

}  // namespace

void Daemon::reject(const PendingRequest& request, shm::WireStatus status, const char* why) {
  stats_.requests_rejected.fetch_add(1, std::memory_order_relaxed);
  completer_.complete_one(RequestRef{request.session, request.taken.slot, request.taken.generation,
                                     request.taken.deadline_mono_ns},
                          status, why);
}

bool Daemon::rejected_as_gone(const PendingRequest& request, std::int64_t now_ns, const char* late_why) {
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

bool Daemon::admit(std::shared_ptr<ClientSession> session, const TakenRequest& taken,
                   std::int64_t now_ns, AdmissionView& view) {
  PendingRequest request{std::move(session), taken, now_ns};
  if (taken.model >= kModels) {
    // A client's bug, not a protocol breach: the request fails alone, the client stays.
    const std::string why = fmt::format("unknown model id {}: this daemon serves {} model(s), ids 0 to {}",
                                        taken.model, kModels, kModels - 1);
    reject(request, shm::WireStatus::kUnknownModel, why.c_str());
    return false;
  }
  if (rejected_as_gone(request, now_ns, "deadline passed before the daemon took the request")) return false;
  if (taken.deadline_mono_ns != 0 && would_miss_deadline(taken, now_ns, view)) {
    stats_.requests_shed_by_class[static_cast<std::size_t>(taken.priority)].fetch_add(1, std::memory_order_relaxed);
    reject(request, shm::WireStatus::kOverloaded,
           "overloaded: the daemon's backlog would outlast this request's deadline; retry later");
    return false;
  }
  pending_.push_back(std::move(request));
  return true;
}

bool Daemon::would_miss_deadline(const TakenRequest& taken, std::int64_t now_ns, AdmissionView& view) {
  if (!view.taken) {
    view.delays = router_->delay_view(now_ns);
    view.passing_per_ns.fill(0);
    for (std::size_t c = 0; c < arrivals_.size(); ++c) {
      const double per_ns = arrivals_[c].per_second(now_ns) / 1e9;
      // Classes served before rank r pass a request of rank r.
      for (std::size_t r = rank_of(static_cast<shm::WirePriority>(c)) + 1; r < PendingQueue::kClasses; ++r) {
        view.passing_per_ns[r] += per_ns;
      }
    }
    view.taken = true;
  }
  // Everything taken and not yet answered is ahead of this request, but for the waiting requests
  // of lower classes, which it will pass. Rejecting now, when it cannot make its deadline anyway,
  // keeps the backlog (and memory) bounded by what can be served in time, and tells the caller at
  // once instead of at its deadline. Under overload the lowest class sees the longest queue, so
  // it is refused first, then normal; high sees only its own.
  const std::size_t rank = rank_of(taken.priority);
  std::uint64_t behind = 0;
  for (std::size_t r = rank + 1; r < PendingQueue::kClasses; ++r) behind += pending_.size_of_rank(r);
  const std::uint64_t not_waiting = behind + view.delays.dispatched;
  const std::uint64_t in_flight = stats_.in_flight();
  const std::uint64_t waiting_ahead = in_flight > not_waiting ? in_flight - not_waiting : 0;
  // No exception for an estimate that went wrong: a device's fit counts only while it keeps
  // running batches (Router::lane_view), so refusing everything sets it aside within a second.
  std::int64_t delay_ns = Router::estimate_delay_ns(view.delays, waiting_ahead, config_.batch.max_batch);
  // Requests of higher classes that arrive while this one waits will pass it too.
  if (view.passing_per_ns[rank] > 0) {
    const auto passing = static_cast<std::uint64_t>(view.passing_per_ns[rank] * static_cast<double>(delay_ns));
    delay_ns = Router::estimate_delay_ns(view.delays, waiting_ahead + passing, config_.batch.max_batch);
  }
  // A fifth of the budget is kept back for what the estimate cannot see: batch-time jitter, and
  // the completion reaching the caller. deadline > now here, so budget_ns cannot overflow, and
  // taking the fifth off by division keeps a far deadline from overflowing.
  const std::int64_t budget_ns = taken.deadline_mono_ns - now_ns;
  const std::int64_t allowed_ns = budget_ns - budget_ns / 5;
  if (delay_ns <= allowed_ns) return false;
  return delay_within_floor_ns(rank, now_ns, view) > allowed_ns;
}

std::int64_t Daemon::delay_within_floor_ns(std::size_t rank, std::int64_t /*now_ns*/,
                                           const AdmissionView& view) const noexcept {
  const std::uint32_t percent = rank == 1 ? config_.normal_floor_percent
                                          : rank == 2 ? config_.low_floor_percent : 0;
  if (percent == 0) return INT64_MAX;
  // Its class's floor (PendingQueue) serves it however much the classes above send: the lanes
  // free, the next batch takes it once its class's requests ahead have gone, and those leave at
  // the floor's share of the lanes' pace.
  const Router::DelayView& delays = view.delays;
  const std::uint64_t own_ahead = pending_.size_of_rank(rank);
  const std::int64_t own_ns = std::max<std::int64_t>(
      0, Router::estimate_delay_ns(delays, own_ahead, config_.batch.max_batch) - delays.first_free_ns);
  const auto next_batch_ns = static_cast<std::int64_t>(delays.measured_batch_ns);
  return delays.first_free_ns + next_batch_ns + own_ns * 100 / percent;
}

bool Daemon::move_into_batch(PendingRequest& request, std::int64_t now_ns) {
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
  if (batch.requests.empty()) batch.opened_ns = request.arrival_ns;
  batch.input_offsets.push_back(static_cast<std::uint32_t>(batch.input_bytes.size()));
  shares_.add(request.session->uid(), rank_of(taken.priority), taken.input_bytes);
  batch.requests.push_back(RequestRef{std::move(request.session), taken.slot, taken.generation,
                                      taken.deadline_mono_ns, taken.request_id, request.arrival_ns,
                                      taken.priority});
  batcher_.add(taken.input_bytes, WaitOrFullBatcher::at_ns(request.arrival_ns), taken.deadline_mono_ns);
  return true;
}

bool Daemon::cut_for_fairness(const PendingRequest& request, std::optional<CostFit>& cost,
                              std::int64_t now_ns) const noexcept {
  const uid_t tenant = request.session->uid();
  const std::size_t cls = rank_of(request.taken.priority);
  if (config_.fair_slice_us == 0 || !shares_.holds_other_than(tenant, cls)) return false;
  if (!cost) cost = router_->lane_view(now_ns).cost;  // once a pass, and only for a mixed batch
  if (!cost->fitted) return false;
  // A device whose every batch costs more than the slice still batches: the least run a cut
  // leaves is then twice its fixed cost, so at least half of each run is the requests' own work.
  const double least_ns = std::max(static_cast<double>(config_.fair_slice_us) * 1e3, 2 * cost->fixed_ns);
  return shares_.would_double_anothers(tenant, cls, request.taken.input_bytes, *cost, least_ns);
}

bool Daemon::fill_batches(std::int64_t now_ns) {
  bool progressed = false;
  const std::int64_t urgent_ns = pending_.empty() ? 0 : urgent_ns_before_deadline(now_ns);
  batcher_.cap_bytes(router_->byte_budget(now_ns));  // device memory (router_memory.cpp)
  std::optional<CostFit> cost;  // the lanes' fitted cost, read when the fairness cut first needs it
  while (!pending_.empty()) {
    if (open_ == nullptr && (open_ = router_->try_acquire()) == nullptr) break;
    // While the open batch is held for a lane, the rest wait here, in class order, until a lane
    // frees: a batch filled now would fix its members in arrival order, and a high-priority
    // request arriving meanwhile would wait behind them.
    if (batcher_.count() > 0 && holding_for_lane(now_ns)) break;
    PendingRequest& request = pending_.front(now_ns, urgent_ns);
    if (!batcher_.fits(request.taken.input_bytes) || cut_for_fairness(request, cost, now_ns)) {
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

std::int64_t Daemon::urgent_ns_before_deadline(std::int64_t now_ns) const noexcept {
  // A request this close to its deadline must join the next batch: that batch's run (at most a
  // full one) and a margin. Admission already counted the higher classes that would pass it, so
  // this is the exception (the estimate was wrong), not the way lower classes get served.
  const Router::LaneView lanes = router_->lane_view(now_ns);
  const double full_batch_ns =
      lanes.cost.fitted ? lanes.cost.predict_ns(config_.batch.max_batch, 0) : 0;
  return static_cast<std::int64_t>(full_batch_ns) + BatchPolicy::kDeadlineMarginNs;
}

PolicyView Daemon::policy_view(std::int64_t now_ns) const noexcept {
  const Router::LaneView lanes = router_->lane_view(now_ns);
  PolicyView view;
  view.lanes = lanes.lanes;
  view.idle_lanes = lanes.idle_lanes;
  view.cost = lanes.cost;
  view.arrivals_per_s = 0;
  double bytes_per_s = 0;
  for (const RateMeter& meter : arrivals_) {
    view.arrivals_per_s += meter.per_second(now_ns);
    bytes_per_s += meter.bytes_per_second(now_ns);
  }
  view.mean_input_bytes = view.arrivals_per_s > 0 ? bytes_per_s / view.arrivals_per_s : 0;
  return view;
}

void Daemon::refresh_policy_stats(std::int64_t now_ns) noexcept {
  if (now_ns < next_policy_stats_ns_) return;
  next_policy_stats_ns_ = now_ns + kPolicyStatsPeriodNs;
  const PolicyView view = policy_view(now_ns);
  stats_.arrivals_per_s.store(static_cast<std::uint64_t>(view.arrivals_per_s), std::memory_order_relaxed);
  for (std::size_t c = 0; c < arrivals_.size(); ++c) {
    stats_.arrivals_per_s_by_class[c].store(static_cast<std::uint64_t>(arrivals_[c].per_second(now_ns)),
                                            std::memory_order_relaxed);
  }
  stats_.target_batch.store(config_.batch.policy == PolicyKind::kAdaptive ? policy_.target_batch(view)
                                                                          : config_.batch.max_batch,
                            std::memory_order_relaxed);
}

bool Daemon::holding_for_lane(std::int64_t now_ns) const noexcept {
  if (config_.batch.policy != PolicyKind::kAdaptive || stop_requested_.load(std::memory_order_relaxed)) {
    return false;
  }
  const Router::LaneView lanes = router_->lane_view(now_ns);
  return lanes.lanes > 0 && lanes.idle_lanes == 0;
}

FlushDecision Daemon::decide_flush(std::int64_t now_ns) {
  recheck_ns_ = 0;
  held_for_lane_ = false;
  if (batcher_.count() == 0) return {};
  const OpenBatchState state{batcher_.count(), batcher_.bytes(), batcher_.full(), batcher_.oldest_ns(),
                             batcher_.earliest_deadline_ns()};
  const PolicyView view = config_.batch.policy == PolicyKind::kAdaptive ? policy_view(now_ns) : PolicyView{};
  const FlushDecision decision = policy_.decide(state, view, now_ns);
  if (!decision.flush()) recheck_ns_ = decision.recheck_ns;
  held_for_lane_ = !decision.flush() && view.lanes > 0 && view.idle_lanes == 0;
  return decision;
}

void Daemon::flush_open_batch(FlushReason reason) {
  if (open_ == nullptr || open_->requests.empty()) return;
  stats_.flushes[static_cast<std::size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  open_->id = next_batch_id_++;
  router_->run_or_dispatch(open_);
  open_ = nullptr;
  batcher_.reset();
  shares_.clear();
}

bool Daemon::drain_rings(std::int64_t now_ns) {
  bool progressed = false;
  std::string why;
  AdmissionView admission;
  std::array<std::uint64_t, shm::kWirePriorities> taken_count{};
  std::array<std::uint64_t, shm::kWirePriorities> taken_bytes{};
  const std::size_t clients = drain_order_.size();
  for (std::size_t visited = 0; visited < clients && !drain_order_.empty(); ++visited) {
    if (drain_cursor_ >= drain_order_.size()) drain_cursor_ = 0;
    std::shared_ptr<ClientSession> session = drain_order_[drain_cursor_++];

    unsigned taken_here = 0;
    for (; taken_here < kBurstPerClient; ++taken_here) {
      TakenRequest taken;
      const TakeResult result = session->take(taken, why);
      if (result == TakeResult::kEmpty) break;
      if (result == TakeResult::kViolation) {
        drop_session(session->id(), why.c_str());
        break;
      }
      session->mark_in_flight(taken.slot, taken.generation);
      session->pop();
      stats_.requests_taken.fetch_add(1, std::memory_order_relaxed);
      if (taken.downgraded) stats_.priority_downgrades.fetch_add(1, std::memory_order_relaxed);
      stats_.requests_taken_by_class[static_cast<std::size_t>(taken.priority)].fetch_add(1, std::memory_order_relaxed);
      ++taken_count[static_cast<std::size_t>(taken.priority)];
      taken_bytes[static_cast<std::size_t>(taken.priority)] += taken.input_bytes;
      admit(session, taken, now_ns, admission);
      progressed = true;
    }
    session->publish();
  }
  for (std::size_t c = 0; c < arrivals_.size(); ++c) {
    if (taken_count[c] > 0) arrivals_[c].add(taken_count[c], taken_bytes[c], now_ns);
  }
  return progressed;
}

}  // namespace batchd

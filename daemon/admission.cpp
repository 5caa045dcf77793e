#include "daemon/admission.hpp"

#include <algorithm>
#include <climits>

namespace batchd {

void Admission::look(const Router::DelayView& delays, const ArrivalRates& arrivals, std::int64_t now_ns) noexcept {
  delays_ = delays;
  passing_per_ns_.fill(0);
  for (std::uint32_t c = 0; c < shm::kWirePriorities; ++c) {
    const auto priority = static_cast<shm::WirePriority>(c);
    const double per_ns = arrivals.per_second(priority, now_ns) / 1e9;
    // Classes served before rank r pass a request of rank r.
    for (std::size_t r = shm::rank_of(priority) + 1; r < PendingQueue::kClasses; ++r) passing_per_ns_[r] += per_ns;
  }
  looked_ = true;
}

bool Admission::would_miss_deadline(std::size_t rank, std::int64_t deadline_ns, std::int64_t now_ns,
                                    const Backlog& backlog, const ModelSettings& settings) const noexcept {
  // Everything taken and not yet answered is ahead of this request, but for the waiting requests
  // of lower classes, which it will pass. Under overload the lowest class sees the longest queue,
  // so it is refused first, then normal; high sees only its own. Only this model's own backlog
  // counts: it has its own lanes.
  std::uint64_t waiting = 0;
  std::uint64_t behind = 0;
  for (std::size_t r = 0; r < PendingQueue::kClasses; ++r) {
    waiting += backlog.waiting_by_rank[r];
    if (r > rank) behind += backlog.waiting_by_rank[r];
  }
  const std::uint64_t not_waiting = behind + delays_.dispatched;
  // This model's requests taken and not answered: waiting, in the open batch, on the lanes, and
  // this one.
  const std::uint64_t in_flight = waiting + backlog.in_open_batch + delays_.dispatched + 1;
  const std::uint64_t waiting_ahead = in_flight > not_waiting ? in_flight - not_waiting : 0;
  const std::uint32_t max_batch = settings.batch.max_batch;
  // No exception for an estimate that went wrong: a device's fit counts only while it keeps
  // running batches (Router::lane_view), so refusing everything sets it aside within a second.
  std::int64_t delay_ns = Router::estimate_delay_ns(delays_, waiting_ahead, max_batch);
  // Requests of higher classes that arrive while this one waits will pass it too.
  if (passing_per_ns_[rank] > 0) {
    const auto passing = static_cast<std::uint64_t>(passing_per_ns_[rank] * static_cast<double>(delay_ns));
    delay_ns = Router::estimate_delay_ns(delays_, waiting_ahead + passing, max_batch);
  }
  // deadline > now here, so budget_ns cannot overflow, and taking the fifth off by division keeps
  // a far deadline from overflowing.
  const std::int64_t budget_ns = deadline_ns - now_ns;
  const std::int64_t allowed_ns = budget_ns - budget_ns / 5;
  if (delay_ns <= allowed_ns) return false;
  return delay_within_floor_ns(rank, backlog, settings) > allowed_ns;
}

std::int64_t Admission::delay_within_floor_ns(std::size_t rank, const Backlog& backlog,
                                              const ModelSettings& settings) const noexcept {
  const std::uint32_t percent = rank == 1 ? settings.normal_floor_percent
                                          : rank == 2 ? settings.low_floor_percent : 0;
  if (percent == 0) return INT64_MAX;
  // Its class's floor (PendingQueue) serves it however much the classes above send: the lanes
  // free, the next batch takes it once its class's requests ahead have gone, and those leave at
  // the floor's share of the lanes' pace.
  const std::uint64_t own_ahead = backlog.waiting_by_rank[rank];
  const std::int64_t own_ns = std::max<std::int64_t>(
      0, Router::estimate_delay_ns(delays_, own_ahead, settings.batch.max_batch) - delays_.first_free_ns);
  const auto next_batch_ns = static_cast<std::int64_t>(delays_.measured_batch_ns);
  return delays_.first_free_ns + next_batch_ns + own_ns * 100 / percent;
}

}  // namespace batchd

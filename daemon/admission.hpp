// Admission by predicted delay, one model's: whether a request taken off a ring can still be
// answered within its deadline behind what the model already holds. Refusing at once what cannot
// make it keeps the backlog (and memory) bounded by what can be served in time, and tells the
// caller now rather than at its deadline. A request counts the model's requests ahead of it (of
// its class and above, and everything on the lanes) and the higher classes that will arrive and
// pass it while it waits; a class floor (PendingQueue) bounds a lower class's wait however busy
// the classes above. Pure: the lanes' view and the time come in. Drain thread only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "daemon/arrival_rates.hpp"
#include "daemon/config.hpp"
#include "daemon/pending_queue.hpp"
#include "daemon/router.hpp"

namespace batchd {

class Admission {
 public:
  // The model's requests taken and not answered, but for those on the lanes (DelayView::dispatched).
  struct Backlog {
    std::array<std::uint64_t, PendingQueue::kClasses> waiting_by_rank{};  // admitted, waiting for a batch
    std::uint64_t in_open_batch = 0;
  };

  // A drain pass begins: the next verdict looks at the lanes afresh (look()).
  void new_pass() noexcept { looked_ = false; }
  [[nodiscard]] bool looked() const noexcept { return looked_; }
  // What this pass's verdicts read: the lanes' delays and the classes' arrival rates.
  void look(const Router::DelayView& delays, const ArrivalRates& arrivals, std::int64_t now_ns) noexcept;

  // Whether a request of class `rank` with this deadline (not 0) would wait more than four fifths
  // of what its deadline leaves, even at its class's floor share: then it is refused
  // ("overloaded"). The fifth kept back is for what the estimate cannot see: batch-time jitter,
  // and the completion reaching the caller. After look().
  [[nodiscard]] bool would_miss_deadline(std::size_t rank, std::int64_t deadline_ns, std::int64_t now_ns,
                                         const Backlog& backlog, const ModelSettings& settings) const noexcept;

 private:
  // The wait of a request of class `rank` served at its class's floor share (normal_floor_percent,
  // low_floor_percent) however busy the classes above; INT64_MAX without a floor.
  [[nodiscard]] std::int64_t delay_within_floor_ns(std::size_t rank, const Backlog& backlog,
                                                   const ModelSettings& settings) const noexcept;

  bool looked_ = false;
  Router::DelayView delays_;
  std::array<double, PendingQueue::kClasses> passing_per_ns_{};  // by rank: the higher classes' arrivals
};

}  // namespace batchd

// Requests taken out of the clients' rings and admitted, waiting for a batch. Per priority class
// (high, then normal, then low, with floors: PendingQueue), served by deficit round-robin on what
// the requests cost (their input bytes and a per-request share) across tenants (users: a
// front-end's event loops and connections are one), and within a tenant across its clients, so a
// flood queues behind its own requests only, and a user opening many connections gets no more
// than one that opens one. Queues grow by doubling and never shrink while their client stays, so
// steady state allocates nothing; their size is bounded by the clients' slots (each entry holds
// one). Drain thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "daemon/deficit_round.hpp"
#include "daemon/pending_request.hpp"

namespace batchd {

// One client's waiting requests of one class.
class ClientFifo {
 public:
  [[nodiscard]] bool empty() const noexcept { return requests_.empty(); }
  [[nodiscard]] PendingRequest& front() noexcept { return requests_.front(); }
  void pop_front() noexcept { requests_.pop_front(); }
  void push_back(PendingRequest request) {
    session_id_ = request.session->id();
    requests_.push_back(std::move(request));
  }
  // The client `session_id` has gone: its requests are dropped unanswered (nobody reads them), and
  // this queue is done with. Returns how many.
  std::size_t forget(std::uint64_t session_id) noexcept {
    if (session_id != session_id_) return 0;
    const std::size_t dropped = requests_.size();
    requests_.clear();
    gone_ = true;
    return dropped;
  }
  [[nodiscard]] bool idle() const noexcept { return gone_; }

 private:
  Fifo<PendingRequest> requests_;
  std::uint64_t session_id_ = 0;
  bool gone_ = false;
};

struct SessionOf {
  std::uint64_t operator()(const PendingRequest& request) const noexcept { return request.session->id(); }
};
struct TenantOf {
  uid_t operator()(const PendingRequest& request) const noexcept { return request.session->uid(); }
};

// One class's requests: deficit round-robin across tenants, and within each across its clients.
class ClassQueue {
 public:
  static constexpr std::uint64_t kQuantumBytes = kRoundQuantumBytes;
  static constexpr std::uint64_t kRequestOverheadBytes = batchd::kRequestOverheadBytes;
  [[nodiscard]] static std::uint64_t cost_of(const PendingRequest& request) noexcept { return request_cost(request); }

  [[nodiscard]] bool empty() const noexcept { return tenants_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return tenants_.size(); }
  // Precondition: !empty(). The next request; the same one until pop_front().
  [[nodiscard]] PendingRequest& front() noexcept { return tenants_.front(); }
  void pop_front() noexcept { tenants_.pop_front(); }
  void push_back(PendingRequest request) { tenants_.push_back(std::move(request)); }
  // Forgets a client that has gone: its waiting requests are dropped unanswered. Returns how many.
  std::size_t forget(std::uint64_t session_id) { return tenants_.forget(session_id); }

 private:
  DeficitRound<uid_t, DeficitRound<std::uint64_t, ClientFifo, SessionOf>, TenantOf> tenants_;
};

// The classes together: high is batched first, then normal, then low; but no class takes
// everything. A lower class with waiting work keeps a floor share of what is served (its floor,
// by cost): each request served from another class credits it floor x that request's cost, and
// its next request goes first once the credit covers it; credit is for waiting work, so it is
// dropped when the class empties. And a lower class's next request goes first when its deadline
// is near (or, without a deadline, when it has waited kMaxWaitBehindNs), so no class starves
// while its requests can still be answered in time.
class PendingQueue {
 public:
  static constexpr std::size_t kClasses = 3;
  static constexpr std::int64_t kMaxWaitBehindNs = 1'000'000'000;
  // The most credit a class saves up while it waits: a few large requests' worth, so a class
  // held back by the deadline rule does not come back with a burst that starves the others.
  static constexpr double kMaxCredit = 4.0 * (64 * 1024 + ClassQueue::kRequestOverheadBytes);

  // The floor share of each class, by rank, in [0, 1) (the top class's is not used: it is served
  // first anyway); 0: strict priority below the classes above.
  void set_floors(const std::array<double, kClasses>& floors) noexcept { floors_ = floors; }

  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] std::size_t size() const noexcept {
    return classes_[0].size() + classes_[1].size() + classes_[2].size();
  }
  // Waiting requests of the class served `rank`-th.
  [[nodiscard]] std::size_t size_of_rank(std::size_t rank) const noexcept { return classes_[rank].size(); }

  // Precondition: !empty(). Chooses the next request and returns it; the same one until
  // pop_front() (pushes do not change it). `urgent_ns`: how long before its deadline a request
  // must be batched to be answered in time (its batch's run and a margin).
  [[nodiscard]] PendingRequest& front(std::int64_t now_ns, std::int64_t urgent_ns) noexcept {
    chosen_ = pick(now_ns, urgent_ns);
    return classes_[chosen_].front();
  }
  // Removes what front() returned, crediting the other waiting classes their floors of its cost.
  void pop_front() noexcept {
    const std::size_t first = top();
    const auto cost = static_cast<double>(ClassQueue::cost_of(classes_[chosen_].front()));
    classes_[chosen_].pop_front();
    if (chosen_ != first) credit_[chosen_] = std::max(0.0, credit_[chosen_] - cost);
    for (std::size_t rank = 0; rank < kClasses; ++rank) {
      if (classes_[rank].empty()) {
        credit_[rank] = 0;
      } else if (rank != chosen_) {
        credit_[rank] = std::min(kMaxCredit, credit_[rank] + floors_[rank] * cost);
      }
    }
  }

  void push_back(PendingRequest request) {
    classes_[shm::rank_of(request.taken.priority)].push_back(std::move(request));
  }

  // Forgets a client that has gone (see ClassQueue::forget). Returns how many were dropped.
  std::size_t forget(std::uint64_t session_id) {
    std::size_t dropped = 0;
    for (ClassQueue& queue : classes_) dropped += queue.forget(session_id);
    return dropped;
  }

 private:
  // The first class with waiting requests. Precondition: !empty().
  [[nodiscard]] std::size_t top() const noexcept {
    std::size_t rank = 0;
    while (classes_[rank].empty()) ++rank;
    return rank;
  }

  [[nodiscard]] std::size_t pick(std::int64_t now_ns, std::int64_t urgent_ns) noexcept {
    const std::size_t first = top();
    for (std::size_t rank = kClasses - 1; rank > first; --rank) {
      if (classes_[rank].empty()) continue;
      const PendingRequest& next = classes_[rank].front();
      const std::int64_t deadline = next.taken.deadline_mono_ns;
      if (deadline != 0 ? deadline - now_ns <= urgent_ns : now_ns - next.arrival_ns >= kMaxWaitBehindNs) {
        return rank;
      }
    }
    for (std::size_t rank = first + 1; rank < kClasses; ++rank) {
      if (!classes_[rank].empty() &&
          credit_[rank] >= static_cast<double>(ClassQueue::cost_of(classes_[rank].front()))) {
        return rank;
      }
    }
    return first;
  }

  std::array<ClassQueue, kClasses> classes_;
  std::size_t chosen_ = 0;  // the class front() last chose
  std::array<double, kClasses> floors_{0, 0.1, 0.1};
  std::array<double, kClasses> credit_{};  // of each class's floor, not yet used
};

}  // namespace batchd

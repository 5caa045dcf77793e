// Requests taken out of the clients' rings and admitted, waiting for a batch. Per priority class
// (high, then normal, then low) one FIFO per client, served by deficit round-robin on what the
// requests cost (their input bytes and a per-request share), so a client's flood queues behind
// its own requests only, and a client of large inputs gets the same share of the batches' work
// as one of small inputs, not the same count of requests. Queues grow by doubling and never
// shrink while their client stays, so steady state allocates nothing; their size is bounded by
// the clients' slots (each entry holds one). Drain thread only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/client_session.hpp"

namespace batchd {

struct PendingRequest {
  std::shared_ptr<ClientSession> session;
  TakenRequest taken;       // input still in shared memory: copied when batched
  std::int64_t arrival_ns;  // when the drain loop took it: the wait-or-full clock starts here
};

// A FIFO ring buffer that grows by doubling and never shrinks.
template <class T>
class Fifo {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  // Precondition: !empty().
  [[nodiscard]] T& front() noexcept { return items_[head_]; }
  void pop_front() noexcept {
    items_[head_] = T{};  // drops what it holds (a session reference) now, not on reuse
    head_ = (head_ + 1) % items_.size();
    --size_;
  }
  void push_back(T item) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) % items_.size()] = std::move(item);
    ++size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(std::max<std::size_t>(16, items_.size() * 2));
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(items_[(head_ + i) % items_.size()]);
    items_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// One class's requests, deficit round-robin across clients: each turn credits a client
// kQuantumBytes of work, and it is served while its credit covers its next request.
class ClassQueue {
 public:
  // What one turn lets a client's requests cost. Larger than any one small request's cost, so
  // small requests go several to a turn; a request of the largest inputs waits a few turns.
  static constexpr std::uint64_t kQuantumBytes = 16 * 1024;
  // A request's cost besides its bytes, in bytes: its share of a batch's per-request work.
  static constexpr std::uint64_t kRequestOverheadBytes = 256;

  [[nodiscard]] static std::uint64_t cost_of(const PendingRequest& request) noexcept {
    return request.taken.input_bytes + kRequestOverheadBytes;
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // Precondition: !empty(). The next request in deficit round-robin order; the same one until
  // pop_front().
  [[nodiscard]] PendingRequest& front() noexcept {
    settle();
    return round_.front()->requests.front();
  }

  // Removes front(), charging its cost to its client; the client keeps its turn while its credit
  // lasts.
  void pop_front() noexcept {
    ClientQueue* queue = round_.front();
    const std::uint64_t cost = cost_of(queue->requests.front());
    queue->credit = queue->credit > cost ? queue->credit - cost : 0;
    queue->requests.pop_front();
    --size_;
    if (queue->requests.empty()) {
      round_.pop_front();
      queue->in_round = false;
      queue->credit = 0;  // credit is for waiting work, not saved up while idle
      queue->credited = false;
    }
  }

  void push_back(PendingRequest request) {
    ClientQueue& queue = queues_[request.session->id()];  // node-based: the address is stable
    queue.requests.push_back(std::move(request));
    ++size_;
    if (!queue.in_round) {
      queue.in_round = true;
      round_.push_back(&queue);
    }
  }

  // Forgets a client that has gone: its waiting requests are dropped unanswered (nobody reads
  // them). Returns how many.
  std::size_t forget(std::uint64_t session_id) {
    auto it = queues_.find(session_id);
    if (it == queues_.end()) return 0;
    const std::size_t dropped = it->second.requests.size();
    if (it->second.in_round) {
      Fifo<ClientQueue*> kept;
      while (!round_.empty()) {
        if (round_.front() != &it->second) kept.push_back(round_.front());
        round_.pop_front();
      }
      round_ = std::move(kept);
    }
    size_ -= dropped;
    queues_.erase(it);
    return dropped;
  }

 private:
  struct ClientQueue {
    Fifo<PendingRequest> requests;
    bool in_round = false;       // listed in round_
    bool credited = false;       // got this turn's quantum
    std::uint64_t credit = 0;    // bytes of work it may still be served this turn
  };

  // Brings to the front of the round a client whose credit covers its next request. Ends: every
  // turn adds a quantum, so the front client's credit grows until it does.
  void settle() noexcept {
    for (;;) {
      ClientQueue* queue = round_.front();
      if (queue->credited && queue->credit >= cost_of(queue->requests.front())) return;
      if (!queue->credited) {
        queue->credit += kQuantumBytes;
        queue->credited = true;
        continue;
      }
      queue->credited = false;  // its turn is over: to the back, keeping what credit is left
      round_.pop_front();
      round_.push_back(queue);  // cannot allocate: the round never holds more than its capacity
    }
  }

  std::unordered_map<std::uint64_t, ClientQueue> queues_;  // by session id
  Fifo<ClientQueue*> round_;  // clients with waiting requests, next to serve first
  std::size_t size_ = 0;
};

// The order classes are served in: 0 first.
constexpr std::size_t rank_of(shm::WirePriority priority) noexcept {
  switch (priority) {
    case shm::WirePriority::kHigh: return 0;
    case shm::WirePriority::kNormal: return 1;
    case shm::WirePriority::kLow: return 2;
  }
  return 1;
}

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
    classes_[rank_of(request.taken.priority)].push_back(std::move(request));
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

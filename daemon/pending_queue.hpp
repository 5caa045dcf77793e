// Requests taken out of the clients' rings and admitted, waiting for a batch: one FIFO per client,
// served round-robin one request at a time, so a client's flood queues behind its own requests
// only, and while k clients wait each batch of n takes at most ceil(n / k) of any one client's.
// Queues grow by doubling and never shrink while their client stays, so steady state allocates
// nothing; their size is bounded by the clients' slots (each entry holds one). Drain thread only.
#pragma once

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

class PendingQueue {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // Precondition: !empty(). The next request in round-robin order; the same one until pop_front().
  [[nodiscard]] PendingRequest& front() noexcept { return round_.front()->requests.front(); }

  // Removes front() and moves its client to the back of the round.
  void pop_front() noexcept {
    ClientQueue* queue = round_.front();
    round_.pop_front();
    queue->requests.pop_front();
    --size_;
    if (queue->requests.empty()) {
      queue->in_round = false;
    } else {
      round_.push_back(queue);  // cannot allocate: the round never holds more than its capacity
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
    bool in_round = false;  // listed in round_
  };

  std::unordered_map<std::uint64_t, ClientQueue> queues_;  // by session id
  Fifo<ClientQueue*> round_;  // clients with waiting requests, next to serve first
  std::size_t size_ = 0;
};

}  // namespace batchd

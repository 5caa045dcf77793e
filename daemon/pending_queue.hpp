// Requests taken out of the clients' rings and admitted, waiting for a batch: a FIFO ring buffer
// that grows by doubling and never shrinks, so steady state allocates nothing. Its size is
// bounded by the clients' slots (each entry holds one). Drain thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/client_session.hpp"

namespace batchd {

struct PendingRequest {
  std::shared_ptr<ClientSession> session;
  TakenRequest taken;       // input still in shared memory: copied when batched
  std::int64_t arrival_ns;  // when the drain loop took it: the wait-or-full clock starts here
};

class PendingQueue {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  // Precondition: !empty().
  [[nodiscard]] PendingRequest& front() noexcept { return items_[head_]; }
  void pop_front() noexcept {
    items_[head_].session.reset();
    head_ = (head_ + 1) % items_.size();
    --size_;
  }
  void push_back(PendingRequest request) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) % items_.size()] = std::move(request);
    ++size_;
  }

 private:
  void grow() {
    std::vector<PendingRequest> bigger(std::max<std::size_t>(64, items_.size() * 2));
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(items_[(head_ + i) % items_.size()]);
    items_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<PendingRequest> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace batchd

// A request admitted and waiting for a batch, and the FIFO queues that hold such requests.
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

// A FIFO ring buffer that grows by doubling and never shrinks. Its capacity is a power of two,
// so a position wraps by a mask: a division per push and pop showed on the one-caller path.
template <class T>
class Fifo {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  // Precondition: !empty().
  [[nodiscard]] T& front() noexcept { return items_[head_]; }
  void pop_front() noexcept {
    items_[head_] = T{};  // drops what it holds (a session reference) now, not on reuse
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
  }
  void clear() noexcept {
    while (!empty()) pop_front();
  }
  void push_back(T item) {
    if (size_ == items_.size()) grow();
    items_[(head_ + size_) & (items_.size() - 1)] = std::move(item);
    ++size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(std::max<std::size_t>(16, items_.size() * 2));
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move(items_[(head_ + i) & (items_.size() - 1)]);
    items_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> items_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// What serving a request costs, in bytes of work: its input and a per-request share of a batch's
// work (kRequestOverheadBytes), so a client of large inputs gets the same share of the batches'
// work as one of small inputs, not the same count of requests.
inline constexpr std::uint64_t kRequestOverheadBytes = 256;
[[nodiscard]] inline std::uint64_t request_cost(const PendingRequest& request) noexcept {
  return request.taken.input_bytes + kRequestOverheadBytes;
}

}  // namespace batchd

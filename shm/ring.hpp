// The submission ring: a single producer (the client library, its threads serialized in its own
// process) and a single consumer (the daemon's drain loop). Positions are 64-bit and only grow;
// the consumer position lives in the daemon-only completion region.
#pragma once

#include <cstdint>

#include "shm/layout.hpp"
#include "shm/untrusted.hpp"

namespace batchd::shm {

// Producer handle, process-local. Not thread-safe: the caller serializes pushes.
class RingProducer {
 public:
  RingProducer() = default;
  RingProducer(RingTail* tail, RingEntry* entries, const CompletionHeader* head,
                std::uint32_t capacity) noexcept
      : tail_(tail), entries_(entries), head_(head), mask_(capacity - 1),
        tail_local_(tail->tail.load(std::memory_order_relaxed)),
        head_cached_(head->ring_head.load(std::memory_order_acquire)) {}

  // Writes one entry without making it visible, so that several go out with one publish().
  // False when the ring is full: the consumer has not caught up, so the caller is overloaded.
  [[nodiscard]] bool try_stage(RingEntry entry) noexcept {
    if (tail_local_ - head_cached_ > mask_) {
      head_cached_ = head_->ring_head.load(std::memory_order_acquire);
      if (tail_local_ - head_cached_ > mask_) return false;
    }
    store_once(entries_[tail_local_ & mask_], entry);
    ++tail_local_;
    return true;
  }

  // Makes every staged entry visible to the consumer at once: one store to the shared tail line.
  void publish() noexcept {
    // seq_cst, not just release: the producer next reads the consumer's sleeping flag, and the
    // two must not be reordered (see DaemonStatusPage::drain_sleeping).
    tail_->tail.store(tail_local_, std::memory_order_seq_cst);
  }

  [[nodiscard]] bool try_push(RingEntry entry) noexcept {
    if (!try_stage(entry)) return false;
    publish();
    return true;
  }

  [[nodiscard]] std::uint64_t position() const noexcept { return tail_local_; }

 private:
  RingTail* tail_ = nullptr;
  RingEntry* entries_ = nullptr;
  const CompletionHeader* head_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint64_t tail_local_ = 0;
  std::uint64_t head_cached_ = 0;  // a stale head only makes the ring look fuller, never emptier
};

// Consumer handle, owned by the daemon. The producer position is untrusted: refresh() reads it
// once and refuses any value that would claim more entries than the ring holds.
class RingConsumer {
 public:
  RingConsumer() = default;
  RingConsumer(const RingTail* tail, const RingEntry* entries, CompletionHeader* head,
               std::uint32_t capacity) noexcept
      : tail_(tail), entries_(entries), head_(head), capacity_(capacity), mask_(capacity - 1) {
    head_->ring_head.store(0, std::memory_order_release);
  }

  // Loads the producer position; false if it is impossible (behind the consumer or more than a
  // ring ahead), which is a protocol violation by the producer.
  [[nodiscard]] bool refresh() noexcept {
    const std::uint64_t tail = tail_->tail.load(std::memory_order_seq_cst);
    if (tail - head_local_ > capacity_) return false;  // unsigned: also catches tail < head
    tail_seen_ = tail;
    return true;
  }

  [[nodiscard]] std::uint64_t available() const noexcept { return tail_seen_ - head_local_; }

  // Precondition: available() > 0.
  [[nodiscard]] RingEntry peek() const noexcept { return load_once(entries_[head_local_ & mask_]); }

  void pop() noexcept { ++head_local_; }

  // Makes consumed entries' space visible to the producer.
  void publish() noexcept { head_->ring_head.store(head_local_, std::memory_order_release); }

  [[nodiscard]] std::uint64_t position() const noexcept { return head_local_; }

 private:
  const RingTail* tail_ = nullptr;
  const RingEntry* entries_ = nullptr;
  CompletionHeader* head_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t mask_ = 0;
  std::uint64_t head_local_ = 0;
  std::uint64_t tail_seen_ = 0;
};

}  // namespace batchd::shm

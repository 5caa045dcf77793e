// Which requests are traced where the caller did not decide: one in `rate` (0: none), and at
// most `count` in all, then none (-1: no limit): Triton's trace_rate and trace_count, set at start
// and changeable at run time (its trace extension). Any thread; lock-free.
#pragma once

#include <atomic>
#include <cstdint>

namespace batchd::tracing {

class TraceSampler {
 public:
  TraceSampler(std::uint64_t rate, std::int64_t count) noexcept : rate_(rate), left_(count) {}

  void set(std::uint64_t rate, std::int64_t count) noexcept {
    set_rate(rate);
    set_count(count);
  }
  void set_rate(std::uint64_t rate) noexcept { rate_.store(rate, std::memory_order_relaxed); }
  void set_count(std::int64_t count) noexcept { left_.store(count, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t rate() const noexcept { return rate_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t count_left() const noexcept { return left_.load(std::memory_order_relaxed); }

  // A request that comes without a sampled context: whether to trace it.
  [[nodiscard]] bool sample() noexcept { return pick() && take(); }
  // The rate's part alone: whether this request is the one in `rate`.
  [[nodiscard]] bool pick() noexcept {
    const std::uint64_t rate = rate_.load(std::memory_order_relaxed);
    return rate != 0 && seen_.fetch_add(1, std::memory_order_relaxed) % rate == 0;
  }
  // A trace starts (sampled here, or by its caller): false once the count is spent.
  [[nodiscard]] bool take() noexcept {
    std::int64_t left = left_.load(std::memory_order_relaxed);
    for (;;) {
      if (left < 0) return true;
      if (left == 0) return false;
      if (left_.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return true;
    }
  }

 private:
  std::atomic<std::uint64_t> rate_;
  std::atomic<std::int64_t> left_;
  std::atomic<std::uint64_t> seen_{0};
};

}  // namespace batchd::tracing

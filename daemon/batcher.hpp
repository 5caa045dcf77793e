// The wait-or-full batching policy: an open batch is flushed when it holds max_batch requests,
// when the next request would take it past max_batch_bytes, or when its oldest request has
// waited max_wait. Time comes in as an argument, so tests drive it with their own clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace batchd {

// A batch's inputs are addressed with 32-bit offsets (Batch::input_offsets, the backends' and
// the plug-in ABI's), so its byte budget must fit in them.
inline constexpr std::uint64_t kMaxBatchBytes = UINT32_MAX;

struct BatchLimits {
  std::uint32_t max_batch = 64;
  std::chrono::nanoseconds max_wait = std::chrono::milliseconds(50);  // 0: dispatch at once
  std::uint64_t max_batch_bytes = 8U << 20;
};

class WaitOrFullBatcher {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit WaitOrFullBatcher(BatchLimits limits) noexcept : limits_(limits) {}

  // The daemon keeps time as CLOCK_MONOTONIC nanoseconds (shm/clock.hpp), which is steady_clock's
  // epoch on Linux.
  static TimePoint at_ns(std::int64_t ns) noexcept { return TimePoint(std::chrono::nanoseconds(ns)); }
  static std::int64_t ns_of(TimePoint t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

  // Whether a request of `bytes` may join the open batch. An empty batch takes any one request,
  // so a request larger than the byte budget still runs (alone).
  [[nodiscard]] bool fits(std::uint64_t bytes) const noexcept {
    if (count_ == 0) return true;
    return count_ < limits_.max_batch && bytes_ + bytes <= limits_.max_batch_bytes;
  }

  // Adds a request; the first one starts the wait clock. Precondition: fits(bytes).
  void add(std::uint64_t bytes, TimePoint now) noexcept {
    if (count_ == 0) opened_at_ = now;
    ++count_;
    bytes_ += bytes;
  }

  // A request that did not fit was seen: the open batch is as full as it can get.
  void mark_full() noexcept { full_ = count_ > 0; }

  // Whether the open batch should be dispatched now.
  [[nodiscard]] bool due(TimePoint now) const noexcept {
    if (count_ == 0) return false;
    return full_ || count_ >= limits_.max_batch || bytes_ >= limits_.max_batch_bytes ||
           now - opened_at_ >= limits_.max_wait;
  }

  // When the open batch falls due by waiting; nothing when it is empty.
  [[nodiscard]] std::optional<TimePoint> deadline() const noexcept {
    if (count_ == 0) return std::nullopt;
    return opened_at_ + limits_.max_wait;
  }

  // The open batch was dispatched.
  void reset() noexcept {
    count_ = 0;
    bytes_ = 0;
    full_ = false;
  }

  [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] const BatchLimits& limits() const noexcept { return limits_; }
  void set_limits(const BatchLimits& limits) noexcept { limits_ = limits; }

 private:
  BatchLimits limits_;
  std::uint32_t count_ = 0;     // requests in the open batch
  std::uint64_t bytes_ = 0;     // their input bytes
  bool full_ = false;           // a request was turned away for the byte budget
  TimePoint opened_at_{};       // arrival of the oldest request
};

}  // namespace batchd

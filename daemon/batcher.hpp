// The open batch's accounting (requests, bytes, oldest arrival, earliest deadline) and the
// limits every policy keeps, with the fixed wait-or-full rule: an open batch is flushed when it
// holds max_batch requests, when the next request would take it past max_batch_bytes, or when
// its oldest request has waited max_wait. The adaptive rule is BatchPolicy's (batch_policy.hpp).
// Time comes in as an argument, so tests drive it with their own clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace batchd {

// A batch's inputs are addressed with 32-bit offsets (Batch::input_offsets, the backends' and
// the plug-in ABI's), so its byte budget must fit in them.
inline constexpr std::uint64_t kMaxBatchBytes = UINT32_MAX;

// Which rule flushes batches (batch_policy.hpp).
enum class PolicyKind : std::uint32_t { kFixed = 0, kAdaptive = 1 };

// The largest batch by default: the seed's 64 for the fixed rule; for the adaptive one a ceiling it
// reaches only when the load needs it (past what batches of 64 can carry).
inline constexpr std::uint32_t kFixedDefaultMaxBatch = 64;
inline constexpr std::uint32_t kAdaptiveDefaultMaxBatch = 256;

struct BatchLimits {
  std::uint32_t max_batch = kFixedDefaultMaxBatch;  // with kAdaptive a ceiling, not a target
  std::chrono::nanoseconds max_wait = std::chrono::milliseconds(50);  // 0: dispatch at once
  std::uint64_t max_batch_bytes = 8U << 20;
  PolicyKind policy = PolicyKind::kAdaptive;
  // --max-batch was not given and the policy is adaptive: a backend that knows what batch keeps
  // its devices full (BatchCapacity::fill_inputs, cuda) raises max_batch to that.
  bool max_batch_from_backend = false;
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
    return count_ < limits_.max_batch && bytes_ + bytes <= byte_limit();
  }

  // Adds a request (deadline_ns 0: none); the first one starts the wait clock.
  // Precondition: fits(bytes).
  void add(std::uint64_t bytes, TimePoint now, std::int64_t deadline_ns = 0) noexcept {
    if (count_ == 0) {
      opened_at_ = now;
      earliest_deadline_ns_ = 0;
    }
    ++count_;
    bytes_ += bytes;
    if (deadline_ns != 0 && (earliest_deadline_ns_ == 0 || deadline_ns < earliest_deadline_ns_)) {
      earliest_deadline_ns_ = deadline_ns;
    }
  }

  // A request that did not fit was seen: the open batch is as full as it can get.
  void mark_full() noexcept { full_ = count_ > 0; }

  // Whether the open batch should be dispatched now.
  [[nodiscard]] bool due(TimePoint now) const noexcept {
    if (count_ == 0) return false;
    return full_ || count_ >= limits_.max_batch || bytes_ >= byte_limit() ||
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
  [[nodiscard]] bool full() const noexcept { return full_; }
  [[nodiscard]] std::int64_t oldest_ns() const noexcept { return ns_of(opened_at_); }
  // The soonest deadline in the open batch; 0: none of its requests has one.
  [[nodiscard]] std::int64_t earliest_deadline_ns() const noexcept { return earliest_deadline_ns_; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] const BatchLimits& limits() const noexcept { return limits_; }
  void set_limits(const BatchLimits& limits) noexcept { limits_ = limits; }
  // A lower byte limit for now than the policy's: the device-memory budget (Router::byte_budget),
  // refreshed by the drain loop. kMaxBatchBytes: none.
  void cap_bytes(std::uint64_t cap) noexcept { byte_cap_ = cap; }
  [[nodiscard]] std::uint64_t byte_limit() const noexcept {
    return byte_cap_ < limits_.max_batch_bytes ? byte_cap_ : limits_.max_batch_bytes;
  }

 private:
  BatchLimits limits_;
  std::uint64_t byte_cap_ = kMaxBatchBytes;  // cap_bytes
  std::uint32_t count_ = 0;     // requests in the open batch
  std::uint64_t bytes_ = 0;     // their input bytes
  bool full_ = false;           // a request was turned away for the byte budget
  TimePoint opened_at_{};       // arrival of the oldest request
  std::int64_t earliest_deadline_ns_ = 0;
};

}  // namespace batchd

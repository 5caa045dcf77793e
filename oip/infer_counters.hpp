// The Open Inference Protocol's inference statistics (a model's statistics endpoint): counted by
// every front-end the same way, each inference once however many strings it carried.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace batchd::oip {

struct InferStatistics {
  std::uint64_t success_count = 0;
  std::uint64_t success_ns = 0;       // their time in the front-end, from request to answer
  std::uint64_t fail_count = 0;
  std::uint64_t fail_ns = 0;
  std::uint64_t inference_count = 0;  // strings inferred (Triton counts batch elements here)
  std::int64_t last_inference_ms = 0;  // Unix time of the last success; 0: none yet

  InferStatistics& operator+=(const InferStatistics& other) noexcept {
    success_count += other.success_count;
    success_ns += other.success_ns;
    fail_count += other.fail_count;
    fail_ns += other.fail_ns;
    inference_count += other.inference_count;
    last_inference_ms = std::max(last_inference_ms, other.last_inference_ms);
    return *this;
  }
};

// Written by any thread, read by any: relaxed atomics, since a reader wants recent values, not a
// consistent cut.
class InferCounters {
 public:
  // One inference answered, `latency_ns` after it came in, carrying `strings` strings.
  void record(bool ok, std::int64_t latency_ns, std::size_t strings) noexcept {
    const auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(latency_ns, 0));
    if (ok) {
      success_.fetch_add(1, relaxed);
      success_ns_.fetch_add(ns, relaxed);
      strings_.fetch_add(strings, relaxed);
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      last_ms_.store(std::chrono::duration_cast<std::chrono::milliseconds>(now).count(), relaxed);
    } else {
      fail_.fetch_add(1, relaxed);
      fail_ns_.fetch_add(ns, relaxed);
    }
  }

  [[nodiscard]] InferStatistics snapshot() const noexcept {
    return {success_.load(relaxed), success_ns_.load(relaxed), fail_.load(relaxed),
            fail_ns_.load(relaxed),  strings_.load(relaxed),    last_ms_.load(relaxed)};
  }

 private:
  static constexpr auto relaxed = std::memory_order_relaxed;
  std::atomic<std::uint64_t> success_{0};
  std::atomic<std::uint64_t> success_ns_{0};
  std::atomic<std::uint64_t> fail_{0};
  std::atomic<std::uint64_t> fail_ns_{0};
  std::atomic<std::uint64_t> strings_{0};
  std::atomic<std::int64_t> last_ms_{0};
};

}  // namespace batchd::oip

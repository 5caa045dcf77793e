// The Open Inference Protocol's inference statistics (a model's statistics endpoint): counted by
// every front-end the same way, each inference once however many strings it carried.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

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

// A model's batches as the daemon counts them (its models table): the requests its successful
// batch runs answered, those runs, and the requests' summed queue and compute times. Statistics'
// queue and compute figures, which only the daemon sees.
struct ModelTimes {
  std::uint64_t inferences = 0;
  std::uint64_t batches = 0;
  std::uint64_t queue_ns = 0;
  std::uint64_t compute_ns = 0;
  // Its response cache (docs/CACHE.md), over every client: hits and misses and their times.
  std::uint64_t cache_hits = 0, cache_hit_ns = 0, cache_misses = 0, cache_miss_ns = 0;
};

// One model's of the daemon's times by model id (zeros for an id it does not list).
[[nodiscard]] inline ModelTimes times_of(const std::vector<ModelTimes>& times, std::uint32_t model) noexcept {
  return model < times.size() ? times[model] : ModelTimes{};
}

// `requests` of a front-end's inferences at the daemon's mean time per request of their model: the
// front-end sees only an inference's whole time, the daemon the split into queue and compute (over
// every client of the model). 0 until the daemon has answered one.
[[nodiscard]] inline std::uint64_t at_daemon_mean(std::uint64_t requests, std::uint64_t total_ns,
                                                  const ModelTimes& times) noexcept {
  if (times.inferences == 0) return 0;
  return static_cast<std::uint64_t>(static_cast<double>(requests) * static_cast<double>(total_ns) /
                                    static_cast<double>(times.inferences));
}

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

// The counters of each model, by its id in the daemon's models table (ModelDescription::id).
class ModelInferCounters {
 public:
  // As many as a daemon serves models at most (shm::kStatusModels; the front-ends check they agree).
  static constexpr std::size_t kModels = 64;

  void record(std::uint32_t model, bool ok, std::int64_t latency_ns, std::size_t strings) noexcept {
    by_model_[std::min<std::size_t>(model, kModels - 1)].record(ok, latency_ns, strings);
  }
  [[nodiscard]] InferStatistics snapshot(std::uint32_t model) const noexcept {
    return by_model_[std::min<std::size_t>(model, kModels - 1)].snapshot();
  }
  // Every model's together.
  [[nodiscard]] InferStatistics total() const noexcept {
    InferStatistics sum;
    for (const InferCounters& counters : by_model_) sum += counters.snapshot();
    return sum;
  }

 private:
  std::array<InferCounters, kModels> by_model_{};
};

}  // namespace batchd::oip

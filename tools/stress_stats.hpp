// What a run counts: per-thread tallies and latency samples (merged once at the end, so the hot
// path shares no locks), and a few shared atomics that the live progress line reads meanwhile.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "client_lib/client.hpp"

namespace batchd::stress {

// Error kinds are counted by index: first the client library's codes (same order, same names),
// then kinds only the HTTP transport can produce, which have no ErrorCode.
inline constexpr std::size_t kClientErrorKinds = kErrorCodes;
// HTTP 400 that names no known code: the request was malformed (a bug on one side or the other).
inline constexpr std::size_t kBadRequestKind = kClientErrorKinds;
inline constexpr std::size_t kErrorKinds = kClientErrorKinds + 1;

inline constexpr std::size_t error_kind(ErrorCode code) noexcept {
  return static_cast<std::size_t>(code);
}
// "timeout", "overloaded", ..., "bad_request": the names the summary and --json use.
const char* error_kind_name(std::size_t kind) noexcept;
// The kind with this name, or kErrorKinds when none has it.
std::size_t error_kind_by_name(std::string_view name) noexcept;

// Log-linear latency histogram in microseconds (8 steps per power of two, so within ~12%),
// updated with relaxed atomics: good enough for a progress line, never used for the summary.
class LiveHistogram {
 public:
  static constexpr std::size_t kBuckets = 16 + 60 * 8;
  using Counts = std::array<std::uint64_t, kBuckets>;

  void add(std::int64_t latency_ns) noexcept;
  // The approximate q-quantile (0..1) so far, in microseconds; 0 when empty.
  [[nodiscard]] std::uint64_t quantile_us(double q) const noexcept { return quantile_us(counts(), q); }
  // The counts so far; two snapshots' difference is the histogram of the time between them.
  [[nodiscard]] Counts counts() const noexcept;
  [[nodiscard]] static std::uint64_t quantile_us(const Counts& counts, double q) noexcept;

 private:
  static std::size_t bucket_of(std::uint64_t us) noexcept;
  static std::uint64_t bucket_floor(std::size_t bucket) noexcept;
  std::array<std::atomic<std::uint64_t>, kBuckets> counts_{};
};

struct LiveStats {
  std::atomic<std::uint64_t> sent{0};
  std::atomic<std::uint64_t> finished{0};  // ok + wrong + errors
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> wrong{0};
  LiveHistogram latency;
};

// What the requests of one priority class came to (or, merged, those of a whole run).
struct Tally {
  std::uint64_t sent = 0;
  std::uint64_t ok = 0;
  std::uint64_t wrong = 0;
  std::array<std::uint64_t, kErrorKinds> errors{};
  std::vector<std::int64_t> latencies_ns;  // answered requests only (ok and wrong)

  void merge(Tally&& other);
  [[nodiscard]] std::uint64_t error_total() const noexcept;
};

// One Tally per priority class, so the summary can say how each class fared.
struct Tallies {
  std::array<Tally, kPriorityClasses> by_class;

  [[nodiscard]] Tally& operator[](Priority priority) noexcept {
    return by_class[static_cast<std::size_t>(priority)];
  }
  [[nodiscard]] const Tally& operator[](Priority priority) const noexcept {
    return by_class[static_cast<std::size_t>(priority)];
  }
  void merge(Tallies&& other);
};

// Checks and counts outcomes for one thread, each in its request's class. Not thread-safe; each
// recording thread owns one.
class Recorder {
 public:
  // Answers are checked against SHA-256 iterated `cost` times, or, when sim_repeat > 0, against
  // the sim backend's answer.
  // With `expected` (borrowed; --input-file lines with an "output"), an answer is right when it is
  // the output the file gives for its input, whatever the backend.
  Recorder(Tallies& tallies, LiveStats& live, unsigned cost, unsigned sim_repeat,
           const std::unordered_map<std::string, std::string>* expected = nullptr)
      : tallies_(tallies), live_(live), cost_(cost), sim_repeat_(sim_repeat), expected_(expected) {}

  void sent(Priority priority) noexcept;
  // An answer came back: compares it with the local reference and records its latency.
  void answered(Priority priority, std::string_view input, std::string_view output, std::int64_t latency_ns);
  // Failed without an answer; errors carry no latency sample.
  void failed(Priority priority, ErrorCode code) noexcept { failed_kind(priority, error_kind(code)); }
  void failed_kind(Priority priority, std::size_t kind) noexcept;

 private:
  Tallies& tallies_;
  LiveStats& live_;
  unsigned cost_;
  unsigned sim_repeat_;
  const std::unordered_map<std::string, std::string>* expected_ = nullptr;
};

}  // namespace batchd::stress

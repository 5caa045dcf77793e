// Keeps what a client can make the daemon log bounded: a token bucket per kind of message, so a
// refused or misbehaving client repeating itself writes a burst, then about one line a second,
// and the next line that gets through says how many were held back. Drain thread only.
#pragma once

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "shm/clock.hpp"

namespace batchd {

// The kinds of message a client can trigger at will.
enum class LogKind : std::uint8_t { kRefusal, kViolation, kAttachFailure, kCount };

class LogLimiter {
 public:
  static constexpr double kBurst = 20;
  static constexpr double kPerSecond = 1;

  // Whether a message of this kind may be logged at now_ns. When it may, `note` is empty or
  // says how many of its kind were suppressed since the last one logged.
  bool allow(LogKind kind, std::int64_t now_ns, std::string& note);

  // Logs a warning of this kind now, within its budget.
  template <class... Args>
  void warn(LogKind kind, fmt::format_string<Args...> format, Args&&... args) {
    std::string note;
    if (!allow(kind, shm::monotonic_ns(), note)) return;
    spdlog::warn("{}{}", fmt::format(format, std::forward<Args>(args)...), note);
  }

 private:
  struct Bucket {
    double tokens = kBurst;
    std::int64_t refilled_ns = 0;  // 0: never used
    std::uint64_t suppressed = 0;
  };
  std::array<Bucket, static_cast<std::size_t>(LogKind::kCount)> buckets_{};
};

}  // namespace batchd

// The one clock batchd-stress measures and paces with: CLOCK_MONOTONIC in nanoseconds, the same
// clock the client library stamps deadlines with, so intended send times and latencies compare.
#pragma once

#include <time.h>

#include <cerrno>
#include <cstdint>
#include <limits>

#include "shm/clock.hpp"

namespace batchd::stress {

inline std::int64_t now_ns() noexcept { return shm::monotonic_ns(); }

// A time that never comes: no deadline, nothing scheduled.
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

// Absolute sleep, so pacing errors do not accumulate the way relative sleeps would.
inline void sleep_until_ns(std::int64_t deadline_ns) noexcept {
  timespec ts{};
  ts.tv_sec = deadline_ns / 1'000'000'000;
  ts.tv_nsec = deadline_ns % 1'000'000'000;
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

}  // namespace batchd::stress

// CLOCK_MONOTONIC in nanoseconds: the clock of every deadline in shared memory, so the daemon,
// the client library, the front-end and the stress tool all read time the same way. Inline: the
// hot paths stamp every request with it.
#pragma once

#include <time.h>

#include <cstdint>

namespace batchd::shm {

inline std::int64_t monotonic_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace batchd::shm

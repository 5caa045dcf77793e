#include "shm/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace batchd::shm {

int futex_wait_until(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                     std::int64_t deadline_ns) noexcept {
  timespec abs{};
  timespec* timeout = nullptr;
  if (deadline_ns != 0) {
    abs.tv_sec = deadline_ns / 1'000'000'000;
    abs.tv_nsec = deadline_ns % 1'000'000'000;
    timeout = &abs;
  }
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline, so retries never stretch it.
  const long rc = syscall(SYS_futex, &word, FUTEX_WAIT_BITSET, expected, timeout, nullptr,
                          FUTEX_BITSET_MATCH_ANY);
  if (rc == 0) return 0;
  return errno == EAGAIN ? 0 : errno;
}

void futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, &word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace batchd::shm

// Raw shared futex wait/wake (not FUTEX_PRIVATE: the word lives in memory mapped by two
// processes; C++20 atomic::wait does not work across processes).
#pragma once

#include <atomic>
#include <cstdint>

#include "shm/clock.hpp"  // monotonic_ns: the clock of futex deadlines

namespace batchd::shm {

// Sleeps while *word == expected, until woken or CLOCK_MONOTONIC reaches deadline_ns (0: no
// deadline). Returns 0 on wake or value change, ETIMEDOUT, or EINTR.
int futex_wait_until(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                     std::int64_t deadline_ns) noexcept;

// Wakes every process sleeping on word.
void futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept;

// Publishes a new value of a futex word and wakes sleepers only if a waiter flagged itself. The
// store and the flag check are both seq_cst, as are wait_for_change's flag store and re-check
// (Dekker's pattern; seq_cst operations rather than fences, which TSan cannot model): either the
// waiter sees the new value or this sees its flag, so a wake is never lost, and never paid for
// when nobody sleeps.
inline void store_and_wake(std::atomic<std::uint32_t>& word, std::uint32_t value,
                           const std::atomic<std::uint32_t>& notify, std::uint32_t waiter_bit) noexcept {
  word.store(value, std::memory_order_seq_cst);
  if ((notify.load(std::memory_order_seq_cst) & waiter_bit) != 0) futex_wake_all(word);
}

// Adds one to an event sequence word and wakes its sleeper only if it flagged itself in
// `sleeping` (any nonzero value: the flag is the other side's, so it is only a hint). The same
// seq_cst pairing as store_and_wake. Never blocks: FUTEX_WAKE waits on nothing a client holds.
inline void bump_and_wake(std::atomic<std::uint32_t>& sequence,
                          const std::atomic<std::uint32_t>& sleeping) noexcept {
  sequence.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) futex_wake_all(sequence);
}

// Spins until done(word) holds, for spin_ns at most. Returns whether done.
template <class Done>
bool spin_until_done(const std::atomic<std::uint32_t>& word, std::int64_t spin_ns, Done done) noexcept {
  const std::int64_t spin_until = monotonic_ns() + spin_ns;
  for (unsigned i = 0;; ++i) {
    if (done(word.load(std::memory_order_acquire))) return true;
    if ((i & 63U) == 63U && monotonic_ns() >= spin_until) return false;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

// Waits until done(word) holds or the deadline passes: spins for spin_ns first (cheap when the
// answer is near), then flags itself in `notify` and sleeps in FUTEX_WAIT. Returns whether done.
template <class Done>
bool wait_for_change(const std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& notify,
                     std::uint32_t waiter_bit, std::int64_t spin_ns, std::int64_t deadline_ns,
                     Done done) noexcept {
  if (spin_ns > 0 && spin_until_done(word, spin_ns, done)) return true;
  // Read-modify-write, so that waiters owning other bits of the same word never lose theirs.
  notify.fetch_or(waiter_bit, std::memory_order_seq_cst);
  bool finished = false;
  for (;;) {
    const std::uint32_t seen = word.load(std::memory_order_seq_cst);
    if (done(seen)) {
      finished = true;
      break;
    }
    if (deadline_ns != 0 && monotonic_ns() >= deadline_ns) break;
    (void)futex_wait_until(word, seen, deadline_ns);
  }
  notify.fetch_and(~waiter_bit, std::memory_order_relaxed);
  return finished;
}

}  // namespace batchd::shm

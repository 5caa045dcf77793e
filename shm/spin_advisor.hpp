// Whether to spin before sleeping on a futex word. A spin that ends in sleep anyway only took a
// core from everything else (2 cores here), while one that wins saves a wake-up (tens of
// microseconds on a VM). So: spin while at least one wait in kPaysOneIn ended within the spin
// window, and now and then anyway, so that a change of pace is noticed. One per waiting thread.
#pragma once

#include <cstdint>

namespace batchd::shm {

class SpinAdvisor {
 public:
  [[nodiscard]] bool pays() noexcept { return wins_ * kPaysOneIn >= kScore || (++waits_ % kProbeEvery) == 0; }
  // How a wait went: whether it ended within the spin window (spinning or not).
  void note(bool won) noexcept { wins_ = (wins_ * 7 + (won ? kScore : 0)) / 8; }  // a moving average
  // How a wait for the other side of a closed loop went, spinning or not. Within twice the window
  // counts as won: each side's spin shortens the other's wait, so a rule as strict as the window
  // itself can lock a loop into both sides sleeping (measured: one request at a time through a
  // worker settled at 14 us or at 70 us a round trip, run to run; with this, mostly the first).
  void note_wait(std::int64_t waited_ns, std::int64_t window_ns) noexcept { note(waited_ns <= 2 * window_ns); }

 private:
  static constexpr std::uint32_t kScore = 1024;  // every wait won
  static constexpr std::uint32_t kPaysOneIn = 8;
  static constexpr std::uint32_t kProbeEvery = 16;
  std::uint32_t wins_ = kScore;  // starts out spinning
  std::uint32_t waits_ = 0;
};

}  // namespace batchd::shm

// What the control socket's handshakes may cost the drain loop. A token bucket per peer uid
// bounds the connections one user gets a handshake for (past it, a connection is refused right
// after accept: the cheapest point, no poll, no read); a budget per drain pass bounds the
// handshake steps (accepts and hellos) between two looks at the rings; and when the table of
// open handshakes is full, the user holding the most gives way, so users who flood evict only
// themselves. Pure: time comes in as an argument. Drain thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <unordered_map>

namespace batchd {

class HandshakeLimiter {
 public:
  // Handshakes one uid may start per second, sustained, and in a burst. A client attaches once
  // and stays; a service restarting its workers stays far below this.
  static constexpr double kPerUidPerSecond = 200;
  static constexpr double kPerUidBurst = 64;
  // Handshake steps (an accept, a hello read) per drain pass: about a millisecond of work at
  // most between two looks at the rings.
  static constexpr unsigned kStepsPerPass = 32;
  // Uids remembered at most; past it, the ones whose bucket is full again are forgotten.
  static constexpr std::size_t kMaxTrackedUids = 4096;

  // Whether uid may start a handshake at now_ns (takes a token when it may).
  [[nodiscard]] bool admit(uid_t uid, std::int64_t now_ns);

  // A drain pass begins: the step budget is full again.
  void new_pass() noexcept { steps_left_ = kStepsPerPass; }
  // Takes one step of the pass's budget; false when it is spent (the step waits for the next pass).
  [[nodiscard]] bool take_step() noexcept {
    if (steps_left_ == 0) return false;
    --steps_left_;
    return true;
  }

  // Of the uids with handshakes open (uid -> count), the one to give way when the table is full:
  // the most open; on a tie, `newcomer` only if it is among the most (else any of the most).
  [[nodiscard]] static uid_t heaviest(const std::unordered_map<uid_t, unsigned>& open, uid_t newcomer) noexcept;

 private:
  struct Bucket {
    double tokens = kPerUidBurst;
    std::int64_t refilled_ns = 0;
  };
  void forget_idle(std::int64_t now_ns);

  std::unordered_map<uid_t, Bucket> buckets_;
  unsigned steps_left_ = kStepsPerPass;
};

}  // namespace batchd

// The handshake limits (daemon/handshake_limiter.hpp), apart from the drain loop: time is given.
#include <doctest/doctest.h>

#include <unordered_map>

#include "daemon/handshake_limiter.hpp"

using namespace batchd;

TEST_CASE("a user's handshakes come at its rate after a burst, and other users keep their own") {
  HandshakeLimiter limiter;
  std::int64_t now_ns = 1'000'000'000;
  unsigned admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += limiter.admit(1000, now_ns) ? 1 : 0;
  CHECK(admitted == static_cast<unsigned>(HandshakeLimiter::kPerUidBurst));
  CHECK(limiter.admit(1001, now_ns));  // another user is not charged for the first one's flood
  now_ns += 100'000'000;  // a tenth of a second refills a tenth of the rate
  admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += limiter.admit(1000, now_ns) ? 1 : 0;
  CHECK(admitted == static_cast<unsigned>(HandshakeLimiter::kPerUidPerSecond / 10));
}

TEST_CASE("a pass's handshake steps are bounded and come back with the next pass") {
  HandshakeLimiter limiter;
  unsigned steps = 0;
  while (limiter.take_step()) ++steps;
  CHECK(steps == HandshakeLimiter::kStepsPerPass);
  CHECK_FALSE(limiter.take_step());
  limiter.new_pass();
  CHECK(limiter.take_step());
}

TEST_CASE("the user holding the most handshakes gives way; a newcomer with none never does") {
  std::unordered_map<uid_t, unsigned> open{{1, 3}, {2, 7}, {3, 7}};
  const uid_t chosen = HandshakeLimiter::heaviest(open, 9);
  CHECK((chosen == 2 || chosen == 3));
  CHECK(HandshakeLimiter::heaviest(open, 3) == 3);  // among the most: its own oldest goes
  CHECK(HandshakeLimiter::heaviest({}, 5) == 5);
}

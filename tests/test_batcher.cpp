// The wait-or-full policy, driven by a clock the test owns.
#include <doctest/doctest.h>

#include "daemon/batcher.hpp"

using batchd::BatchLimits;
using batchd::WaitOrFullBatcher;
using namespace std::chrono_literals;

namespace {

struct FakeClock {
  WaitOrFullBatcher::TimePoint now{std::chrono::seconds(1000)};
  void advance(std::chrono::nanoseconds d) { now += d; }
};

}  // namespace

TEST_CASE("flushes when the batch reaches max_batch") {
  FakeClock clock;
  WaitOrFullBatcher b(BatchLimits{4, 50ms, 1 << 20});
  for (int i = 0; i < 3; ++i) {
    REQUIRE(b.fits(10));
    b.add(10, clock.now);
    CHECK_FALSE(b.due(clock.now));
  }
  b.add(10, clock.now);
  CHECK(b.due(clock.now));
  CHECK_FALSE(b.fits(10));
  b.reset();
  CHECK_FALSE(b.due(clock.now));
  CHECK(b.count() == 0);
}

TEST_CASE("flushes when the oldest request has waited max_wait") {
  FakeClock clock;
  WaitOrFullBatcher b(BatchLimits{64, 50ms, 1 << 20});
  CHECK_FALSE(b.deadline().has_value());
  b.add(1, clock.now);
  REQUIRE(b.deadline().has_value());
  CHECK(*b.deadline() == clock.now + 50ms);
  clock.advance(30ms);
  b.add(1, clock.now);  // a later request does not restart the clock
  clock.advance(19ms);
  CHECK_FALSE(b.due(clock.now));
  clock.advance(1ms);
  CHECK(b.due(clock.now));
}

TEST_CASE("max_wait 0 dispatches whatever is queued at once") {
  FakeClock clock;
  WaitOrFullBatcher b(BatchLimits{64, 0ms, 1 << 20});
  CHECK_FALSE(b.due(clock.now));
  b.add(5, clock.now);
  CHECK(b.due(clock.now));
}

TEST_CASE("the byte budget closes a batch before it is exceeded") {
  FakeClock clock;
  WaitOrFullBatcher b(BatchLimits{64, 50ms, 100});
  b.add(60, clock.now);
  CHECK(b.fits(40));
  CHECK_FALSE(b.fits(41));
  b.mark_full();
  CHECK(b.due(clock.now));
  b.reset();
  b.add(100, clock.now);  // exactly at budget: due
  CHECK(b.due(clock.now));
}

TEST_CASE("an empty batch takes a request larger than the byte budget") {
  FakeClock clock;
  WaitOrFullBatcher b(BatchLimits{64, 50ms, 100});
  CHECK(b.fits(1000));
  b.add(1000, clock.now);
  CHECK(b.due(clock.now));
  CHECK_FALSE(b.fits(1));
}

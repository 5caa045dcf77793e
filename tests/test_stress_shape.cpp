// batchd-stress's load shapes (--shape): parsing, and when each request of a shaped open loop is
// due, against the rate's integral worked out by hand.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "tools/stress_shape.hpp"
#include "tests/doctest_expected.hpp"

using batchd::stress::RateShape;

namespace {

constexpr std::int64_t kMs = 1'000'000;

// The parse failed, and its message says why.
void check_refused(const char* spec, const char* why) {
  const auto shape = RateShape::parse(spec);
  INFO("spec: ", spec);
  REQUIRE_FALSE(shape);
  CHECK(shape.error().message.find(why) != std::string::npos);
}

RateShape parsed(const char* spec) {
  auto shape = RateShape::parse(spec);
  REQUIRE(shape);
  return *shape;
}

}  // namespace

TEST_CASE("a constant rate is due every 1/rate") {
  const RateShape shape = RateShape::constant(1000);
  CHECK(shape.is_constant());
  CHECK(shape.mean_rate() == doctest::Approx(1000));
  CHECK(shape.offset_ns(0) == 0);
  CHECK(shape.offset_ns(1) == kMs);
  CHECK(shape.offset_ns(2500) == 2500 * kMs);
  CHECK(shape.describe() == "1000");
}

TEST_CASE("bursts with silent gaps repeat, and nothing is due during a gap") {
  // 20 ms at 50,000/s (1,000 requests), then 80 ms of silence: 10,000/s on average.
  const RateShape shape = parsed("50000:0.02,0:0.08");
  CHECK_FALSE(shape.is_constant());
  CHECK(shape.mean_rate() == doctest::Approx(10'000));
  CHECK(shape.offset_ns(0) == 0);
  CHECK(shape.offset_ns(1) == 20'000);
  CHECK(shape.offset_ns(999) == 999 * 20'000);
  // The 1,000th is the next cycle's first: 100 ms in, not in the gap.
  CHECK(shape.offset_ns(1000) == 100 * kMs);
  CHECK(shape.offset_ns(2500) == 200 * kMs + 500 * 20'000);
  CHECK(shape.describe() == "50000:0.02,0:0.08");
}

TEST_CASE("a ramp is due where the rate's integral reaches the request's number") {
  // 0 to 2,000/s over 1 s: N(t) = 1000 t^2 requests, so request k is due at sqrt(k / 1000) s.
  const RateShape shape = parsed("0..2000:1");
  CHECK(shape.mean_rate() == doctest::Approx(1000));
  CHECK(shape.offset_ns(0) == 0);
  CHECK(shape.offset_ns(10) == 100 * kMs);
  CHECK(shape.offset_ns(250) == 500 * kMs);
  // Down again: 2,000 to 0 over 1 s brings the other 1,000; request 1,750 is due when
  // 1000 + 2000 t - 1000 t^2 = 1750, t = 0.5 s into it.
  const RateShape both = parsed("0..2000:1,2000..0:1");
  CHECK(both.offset_ns(1750) == 1500 * kMs);
  // Steps: 100/s for 1 s, then 900/s for 1 s.
  const RateShape steps = parsed("100:1,900:1");
  CHECK(steps.offset_ns(99) == 990 * kMs);
  CHECK(steps.offset_ns(100) == 1000 * kMs);
  CHECK(steps.offset_ns(1000) == 2000 * kMs);  // the next cycle
  CHECK(steps.describe() == "100:1,900:1");
  CHECK(both.describe() == "0..2000:1,2000..0:1");
}

TEST_CASE("a malformed shape is refused with the reason") {
  check_refused("", "expected RATE:SECONDS");
  check_refused("1000", "is not RATE:SECONDS");
  check_refused("1000:0", "more than 0 seconds");
  check_refused("1000:-1", "more than 0 seconds");
  check_refused("-5:1", "rates are requests per second");
  check_refused("abc:1", "rates are requests per second");
  check_refused("1..:1", "rates are requests per second");
  check_refused("2e9:1", "rates are requests per second");
  check_refused("1000:1,", "is not RATE:SECONDS");
  check_refused("nan:1", "rates are requests per second");
  check_refused("0:1", "at least one request");
}

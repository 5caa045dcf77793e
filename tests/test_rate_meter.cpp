// The arrival-rate EWMA, driven by a clock the test owns.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "daemon/rate_meter.hpp"

using batchd::RateMeter;

namespace {

// Arrivals at `per_second` for `seconds`, in drain passes of 100 us, from start_ns; returns the end.
std::int64_t feed(RateMeter& meter, double per_second, double seconds, std::int64_t start_ns,
                  std::uint64_t bytes_each = 100) {
  constexpr std::int64_t kPassNs = 100'000;
  double owed = 0;
  std::int64_t now = start_ns;
  for (; now < start_ns + static_cast<std::int64_t>(seconds * 1e9); now += kPassNs) {
    owed += per_second * static_cast<double>(kPassNs) / 1e9;
    const auto count = static_cast<std::uint64_t>(owed);
    owed -= static_cast<double>(count);
    if (count > 0) meter.add(count, count * bytes_each, now);
  }
  return now;
}

}  // namespace

TEST_CASE("a steady rate is measured") {
  RateMeter meter;
  const std::int64_t end = feed(meter, 1000, 2.0, 1'000'000'000);
  CHECK(std::abs(meter.per_second(end) - 1000) < 50);
  CHECK(std::abs(meter.bytes_per_second(end) - 100'000) < 5'000);
  CHECK(std::abs(meter.mean_bytes() - 100) < 1);
}

TEST_CASE("a step in load is followed within about a second") {
  RateMeter meter;
  std::int64_t now = feed(meter, 1000, 2.0, 1'000'000'000);
  now = feed(meter, 10'000, 1.0, now);
  CHECK(meter.per_second(now) > 9'000);  // 98% of the step after four time constants
  now = feed(meter, 1000, 1.0, now);
  CHECK(meter.per_second(now) < 1'200);
}

TEST_CASE("the rate decays while nothing arrives, and a short lull does not erase it") {
  RateMeter meter;
  const std::int64_t end = feed(meter, 5000, 2.0, 1'000'000'000);
  CHECK(meter.per_second(end + 10'000'000) > 4'500);   // 10 ms of quiet
  CHECK(meter.per_second(end + 2'000'000'000) < 5);    // 2 s of quiet
  CHECK(meter.per_second(end - 1) == doctest::Approx(meter.per_second(end)));  // no negative decay
}

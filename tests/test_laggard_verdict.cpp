// The laggard verdict (daemon/laggard_verdict.hpp): judged only on enough evidence, with
// hysteresis, against the fastest device that has evidence; and when a probe shows a laggard
// fast again.
#include <doctest/doctest.h>

#include <vector>

#include "daemon/laggard_verdict.hpp"

using namespace batchd;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

// A device measured well enough to be judged, its reference batch taking reference_ns.
DeviceSpeed judged(double reference_ns) {
  return DeviceSpeed{.available = true,
                     .reference_ns = reference_ns,
                     .fitted = true,
                     .warm_batches = LaggardVerdict::kMinWarmBatches,
                     .window_age_ns = LaggardVerdict::kMinWindowNs};
}

}  // namespace

TEST_CASE("a device far slower than the fastest is a laggard; one within the bar is not") {
  // The fastest at 300 us: the bar is 4 x 300 us + 1 ms = 2.2 ms.
  const std::vector<DeviceSpeed> devices{judged(300e3), judged(2'100e3), judged(2'300e3), judged(200'000e3)};
  const PoolSpeed speed = LaggardVerdict::judge(devices, 0);
  CHECK(speed.fastest_ns == doctest::Approx(300e3));
  CHECK(speed.fastest_device == 0);
  CHECK_FALSE(speed.laggard(0));
  CHECK_FALSE(speed.laggard(1));
  CHECK(speed.laggard(2));
  CHECK(speed.laggard(3));
}

TEST_CASE("no verdict without evidence: too few warm batches, too short a window, or no trusted fit") {
  // The case that shed requests: a good worker's first batches ran cold (16 ms a reference batch
  // against the fastest's 219 us) 1.4 s after it attached. Each missing piece of evidence keeps
  // it from being judged.
  DeviceSpeed few = judged(16'644e3);
  few.warm_batches = LaggardVerdict::kMinWarmBatches - 1;
  DeviceSpeed young = judged(16'644e3);
  young.window_age_ns = LaggardVerdict::kMinWindowNs - 1;
  DeviceSpeed unfitted = judged(16'644e3);
  unfitted.fitted = false;
  const std::vector<DeviceSpeed> devices{judged(219e3), few, young, unfitted, judged(16'644e3)};
  const PoolSpeed speed = LaggardVerdict::judge(devices, 0);
  CHECK_FALSE(speed.laggard(1));
  CHECK_FALSE(speed.laggard(2));
  CHECK_FALSE(speed.laggard(3));
  CHECK(speed.laggard(4));  // the same speed, judged on enough evidence

  // A laggard whose window opens again (its probe showed it fast: its cost is measured afresh) is
  // tried again, not judged on what it was.
  CHECK_FALSE(LaggardVerdict::judge(std::vector<DeviceSpeed>{judged(219e3), few}, 0b10).laggard(1));
}

TEST_CASE("the fastest is a device with evidence that can take work now") {
  // A faster device without evidence (new) or unavailable (failed, hung) is not the yardstick:
  // against it every other device would be a laggard.
  DeviceSpeed fresh = judged(10e3);
  fresh.warm_batches = 0;
  DeviceSpeed down = judged(20e3);
  down.available = false;
  const std::vector<DeviceSpeed> devices{fresh, down, judged(500e3), judged(900e3)};
  const PoolSpeed speed = LaggardVerdict::judge(devices, 0);
  CHECK(speed.fastest_device == 2);
  CHECK(speed.fastest_ns == doctest::Approx(500e3));
  CHECK(speed.laggards == 0);
  // Nobody with evidence: no fastest, no laggard.
  const PoolSpeed none = LaggardVerdict::judge(std::vector<DeviceSpeed>{fresh, fresh}, 0);
  CHECK(none.fastest_ns == 0);
  CHECK(none.laggards == 0);
}

TEST_CASE("a verdict holds until the device is clearly on the other side of the bar") {
  // Fastest 500 us: a device enters at over 4 x 500 us + 1 ms = 3 ms and leaves at 3 x 500 us +
  // 1 ms = 2.5 ms or under. At 2.8 ms the fastest's own fit moving by a few percent would
  // otherwise flip the verdict every millisecond (measured: ten changes in 80 ms of log).
  const std::vector<DeviceSpeed> devices{judged(500e3), judged(2'800e3)};
  CHECK_FALSE(LaggardVerdict::judge(devices, 0).laggard(1));
  CHECK(LaggardVerdict::judge(devices, 0b10).laggard(1));
  const std::vector<DeviceSpeed> recovered{judged(500e3), judged(2'400e3)};
  CHECK_FALSE(LaggardVerdict::judge(recovered, 0b10).laggard(1));
  const std::vector<DeviceSpeed> slower{judged(500e3), judged(3'100e3)};
  CHECK(LaggardVerdict::judge(slower, 0).laggard(1));
}

TEST_CASE("devices past the first 64 are never laggards") {
  std::vector<DeviceSpeed> devices(70, judged(100'000e3));
  devices[0] = judged(100e3);
  const PoolSpeed speed = LaggardVerdict::judge(devices, 0);
  CHECK(speed.laggard(63));
  CHECK_FALSE(speed.laggard(64));
  CHECK_FALSE(speed.laggard(69));
}

TEST_CASE("a probe shows a laggard fast again when it runs like the fastest, or far under its own fit") {
  // A worker judged on its cold start: its fit says 16 ms for the probe, the fastest would take
  // 300 us; it ran in 350 us.
  CHECK(LaggardVerdict::probe_shows_recovery(350e3, 16'000e3, 300e3));
  // Far under its own fit, though still slower than the fastest (a slow GPU that got faster): its
  // cost is measured afresh.
  CHECK(LaggardVerdict::probe_shows_recovery(20'000e3, 200'000e3, 300e3));
  // A worker slow on every request (Python beside C++): the probe runs as its fit says, far over
  // the fastest's time for the same probe.
  CHECK_FALSE(LaggardVerdict::probe_shows_recovery(2'400e3, 2'500e3, 170e3));
  // A worker 100 times slower: still so.
  CHECK_FALSE(LaggardVerdict::probe_shows_recovery(200'000e3, 200'000e3, 2'000e3));
  // No fastest to compare with: its own fit alone decides.
  CHECK_FALSE(LaggardVerdict::probe_shows_recovery(350e3, 1'000e3, 0));
  CHECK(LaggardVerdict::probe_shows_recovery(350e3, 16'000e3, 0));
}

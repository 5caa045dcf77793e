// Admission by predicted delay (daemon/admission.hpp): a request is refused at once when the
// model's backlog ahead of it, and the higher classes that will pass it, would outlast four fifths
// of its deadline; a class floor keeps a lower class's request that its floor would serve in time.
#include <doctest/doctest.h>

#include "daemon/admission.hpp"

using namespace batchd;

namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kNow = 10'000 * kMs;
constexpr std::size_t kHigh = 0;
constexpr std::size_t kNormal = 1;
constexpr std::size_t kLow = 2;

// One lane, free now, whose batches take 1 ms whatever their size.
Router::DelayView one_lane_of_1ms() {
  Router::DelayView view;
  view.lanes = 1;
  view.cost.fixed_ns = 1e6;
  view.cost.fitted = true;
  view.cost.samples = 100;
  view.measured_batch_ns = 1'000'000;
  return view;
}

ModelSettings settings_of(std::uint32_t floor_percent) {
  ModelSettings settings;
  settings.batch.max_batch = 64;
  settings.normal_floor_percent = floor_percent;
  settings.low_floor_percent = floor_percent;
  return settings;
}

Admission looking_at(const Router::DelayView& view, const ArrivalRates& arrivals = {}) {
  Admission admission;
  admission.look(view, arrivals, kNow);
  return admission;
}

}  // namespace

TEST_CASE("admission: a request is refused when its predicted wait outlasts four fifths of its deadline") {
  const Admission admission = looking_at(one_lane_of_1ms());
  const ModelSettings settings = settings_of(0);
  const Admission::Backlog empty;
  // Alone, it is answered in one batch: 1 ms.
  CHECK_FALSE(admission.would_miss_deadline(kHigh, kNow + 2 * kMs, kNow, empty, settings));  // 1 <= 1.6 ms
  CHECK(admission.would_miss_deadline(kHigh, kNow + kMs, kNow, empty, settings));             // 1 > 0.8 ms
  // Behind the lane's own work: it frees in 3 ms.
  Router::DelayView busy = one_lane_of_1ms();
  busy.first_free_ns = 3 * kMs;
  CHECK(looking_at(busy).would_miss_deadline(kHigh, kNow + 4 * kMs, kNow, empty, settings));  // 4 > 3.2 ms
  CHECK_FALSE(looking_at(busy).would_miss_deadline(kHigh, kNow + 5 * kMs, kNow, empty, settings));
}

TEST_CASE("admission: only the requests a class waits behind count, and the open batch does") {
  const Admission admission = looking_at(one_lane_of_1ms());
  const ModelSettings settings = settings_of(0);
  Admission::Backlog backlog;
  backlog.waiting_by_rank[kNormal] = 640;  // ten full batches of normal requests waiting
  // A high request passes them all: one batch.
  CHECK_FALSE(admission.would_miss_deadline(kHigh, kNow + 5 * kMs, kNow, backlog, settings));
  // A normal one waits behind them: eleven batches.
  CHECK(admission.would_miss_deadline(kNormal, kNow + 5 * kMs, kNow, backlog, settings));
  CHECK_FALSE(admission.would_miss_deadline(kNormal, kNow + 14 * kMs, kNow, backlog, settings));  // 11 <= 11.2
  // The open batch is ahead of everyone: 64 more in it makes the high request's wait two batches.
  backlog.in_open_batch = 64;
  CHECK(admission.would_miss_deadline(kHigh, kNow + 2 * kMs, kNow, backlog, settings));  // 2 > 1.6 ms
  CHECK_FALSE(admission.would_miss_deadline(kHigh, kNow + 3 * kMs, kNow, backlog, settings));
}

TEST_CASE("admission: higher classes arriving while a request waits pass it") {
  const ModelSettings settings = settings_of(0);
  const Admission::Backlog empty;
  ArrivalRates arrivals;
  // 25,000 high requests in one pass: 100,000 a second (RateMeter's 250 ms time constant).
  for (int i = 0; i < 25'000; ++i) arrivals.note(shm::WirePriority::kHigh, 10);
  CHECK(arrivals.end_pass(kNow) == 25'000);
  CHECK(arrivals.per_second(kNow) == doctest::Approx(100'000));
  const Admission with_high = looking_at(one_lane_of_1ms(), arrivals);
  // A normal request alone would take 1 ms; the 100 high requests that come meanwhile pass it,
  // and it leaves in the second batch.
  CHECK(with_high.would_miss_deadline(kNormal, kNow + 2 * kMs, kNow, empty, settings));  // 2 > 1.6 ms
  CHECK_FALSE(looking_at(one_lane_of_1ms()).would_miss_deadline(kNormal, kNow + 2 * kMs, kNow, empty, settings));
  // The high class is passed by none.
  CHECK_FALSE(with_high.would_miss_deadline(kHigh, kNow + 2 * kMs, kNow, empty, settings));
}

TEST_CASE("admission: a class floor admits what its share serves in time, however busy the classes above") {
  const Admission admission = looking_at(one_lane_of_1ms());
  Admission::Backlog backlog;
  backlog.waiting_by_rank[kHigh] = 6'400;  // a hundred batches of high requests
  // Strict priority: a low request waits behind all of them (101 ms) and is refused.
  CHECK(admission.would_miss_deadline(kLow, kNow + 50 * kMs, kNow, backlog, settings_of(0)));
  // A 10 % floor serves it within 11 ms: the next batch (1 ms), then its own at a tenth of the pace.
  CHECK_FALSE(admission.would_miss_deadline(kLow, kNow + 50 * kMs, kNow, backlog, settings_of(10)));
  CHECK(admission.would_miss_deadline(kLow, kNow + 12 * kMs, kNow, backlog, settings_of(10)));  // 11 > 9.6 ms
}

TEST_CASE("admission: each drain pass looks at the lanes afresh") {
  Admission admission;
  CHECK_FALSE(admission.looked());
  admission.look(one_lane_of_1ms(), ArrivalRates{}, kNow);
  CHECK(admission.looked());
  admission.new_pass();
  CHECK_FALSE(admission.looked());
}

// The sim backend's device memory (daemon/sim_memory.hpp): the other tenant's schedule, charging
// a batch's need, and a batch that does not fit failing like a CUDA out-of-memory with nothing
// charged.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "daemon/sim_backend.hpp"
#include "daemon/sim_memory.hpp"
#include "tests/doctest_expected.hpp"

using namespace batchd;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::int64_t kMs = 1'000'000;

std::vector<MemoryRamp> schedule(const char* text) {
  auto parsed = parse_memory_schedule(text);
  REQUIRE(parsed);
  return *parsed;
}

// One batch of `inputs` inputs of `bytes` bytes each.
struct Inputs {
  std::string bytes;
  std::vector<std::uint32_t> offsets{0};
  Inputs(std::size_t inputs, std::size_t each) {
    for (std::size_t i = 0; i < inputs; ++i) {
      bytes += std::string(each, static_cast<char>('a' + i % 26));
      offsets.push_back(static_cast<std::uint32_t>(bytes.size()));
    }
  }
  [[nodiscard]] BatchInput view() const { return {bytes, offsets}; }
};

}  // namespace

TEST_CASE("memory schedules: PERCENT:MS steps, refused when malformed") {
  const auto ramps = schedule("80:1000,80:500,0:0");
  REQUIRE(ramps.size() == 3);
  CHECK(ramps[0].percent == 80);
  CHECK(ramps[0].ms == 1000);
  CHECK(ramps[2].ms == 0);
  CHECK(schedule("").empty());
  CHECK(schedule("12.5:10").at(0).percent == 12.5);
  for (const char* bad : {"80", "80:", ":10", "80:10,", "101:10", "-1:10", "x:10", "80:1.5", "80:10;0:10"}) {
    INFO(bad);
    const auto parsed = parse_memory_schedule(bad);
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message.find("PERCENT:MS") != std::string::npos);
  }
}

TEST_CASE("the other tenant ramps linearly through its cycle, starting from the last step") {
  const auto cycle = schedule("80:1000,80:1000,0:1000,0:1000");  // 4 s
  CHECK(other_percent(cycle, 0) == 0);
  CHECK(other_percent(cycle, 500 * kMs) == doctest::Approx(40));
  CHECK(other_percent(cycle, 1000 * kMs) == doctest::Approx(80));
  CHECK(other_percent(cycle, 1500 * kMs) == doctest::Approx(80));
  CHECK(other_percent(cycle, 2250 * kMs) == doctest::Approx(60));
  CHECK(other_percent(cycle, 3500 * kMs) == doctest::Approx(0));
  CHECK(other_percent(cycle, 4500 * kMs) == doctest::Approx(40));  // again
  CHECK(other_percent(schedule("30:0"), 123 * kMs) == 30);         // a constant share
  CHECK(other_percent(schedule("50:0,10:1000"), 500 * kMs) == doctest::Approx(30));  // a step up, then down
  CHECK(other_percent({}, 5 * kMs) == 0);
}

TEST_CASE("charges add up per device and a batch that does not fit is refused, charging nothing") {
  SimMemory memory(2, 100 * kMiB, 1024, schedule("50:0"));  // 50 MiB taken by the other tenant
  CHECK(memory.need(1000) == 1'024'000);
  DeviceMemory seen;
  REQUIRE(memory.try_charge(0, 30 * kMiB, 0, seen));
  DeviceMemory now = memory.reading(0, 0);
  CHECK(now.total_bytes == 100 * kMiB);
  CHECK(now.free_bytes == 20 * kMiB);
  CHECK(now.batch_bytes == 30 * kMiB);
  CHECK_FALSE(memory.try_charge(0, 21 * kMiB, 0, seen));
  CHECK(seen.free_bytes == 20 * kMiB);
  CHECK(memory.reading(0, 0).free_bytes == 20 * kMiB);  // nothing charged
  CHECK(memory.try_charge(1, 50 * kMiB, 0, seen));      // the other device is apart
  memory.release(0, 30 * kMiB);
  CHECK(memory.reading(0, 0).free_bytes == 50 * kMiB);
  CHECK(memory.reading(0, 0).batch_bytes == 0);

  SimMemory unlimited(2, 0, 1024, {});
  CHECK_FALSE(unlimited.limited());
  CHECK(unlimited.need(1000) == 0);
  CHECK(unlimited.reading(0, 0).total_bytes == 0);
}

TEST_CASE("sim backend: a batch over the device's memory fails as out of memory; one that fits runs") {
  SimOptions options;
  options.devices = 1;
  options.fixed_us = 0;
  options.per_item_us = 0;
  options.memory_mib = 16;
  options.memory_per_byte = 1024;  // 1 KiB of input needs 1 MiB
  options.memory_other = schedule("50:0");  // 8 MiB free
  SimBackend backend(options);
  const DeviceMemory idle = backend.memory(0);
  CHECK(idle.total_bytes == 16 * kMiB);
  CHECK(idle.free_bytes == 8 * kMiB);
  CHECK(backend.batch_memory_bytes(3, 4096) == 4 * kMiB);

  BatchOutput out;
  const Inputs too_big(9, 1024);  // 9 MiB
  const BackendStatus failed = backend.run({0, 0}, too_big.view(), out);
  CHECK_FALSE(failed.ok);
  CHECK(failed.message.find("out of memory") != std::string::npos);
  CHECK(backend.memory(0).free_bytes == 8 * kMiB);  // nothing charged, nothing left charged

  const Inputs fits(8, 1024);  // exactly the 8 MiB free
  REQUIRE(backend.run({0, 0}, fits.view(), out).ok);
  CHECK(out.size() == 8);
  CHECK(backend.memory(0).free_bytes == 8 * kMiB);  // given back at the end
}

TEST_CASE("sim backend: a running batch holds its memory until it ends") {
  SimOptions options;
  options.devices = 1;
  options.fixed_us = 300'000;  // 300 ms
  options.per_item_us = 0;
  options.memory_mib = 16;
  options.memory_per_byte = 1024;
  SimBackend backend(options);
  const Inputs batch(4, 1024);  // 4 MiB
  std::thread runner([&] {
    BatchOutput out;
    CHECK(backend.run({0, 0}, batch.view(), out).ok);
  });
  DeviceMemory during;
  for (int i = 0; i < 200 && during.batch_bytes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    during = backend.memory(0);
  }
  CHECK(during.batch_bytes == 4 * kMiB);
  CHECK(during.free_bytes == 12 * kMiB);
  runner.join();
  CHECK(backend.memory(0).batch_bytes == 0);
  CHECK(backend.memory(0).free_bytes == 16 * kMiB);
}

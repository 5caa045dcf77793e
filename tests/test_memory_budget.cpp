// The device-memory budget (daemon/memory_budget.hpp) on hand-computed readings: a device of
// 1000 MiB, the default high-water mark 0.9 (900 MiB), batches needing 64 device bytes per input
// byte, and the default 8 MiB byte limit.
#include <doctest/doctest.h>

#include <cstdint>

#include "daemon/memory_budget.hpp"

using namespace batchd;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kTotal = 1000 * kMiB;
constexpr std::uint64_t kMaxBytes = 8 * kMiB;
const MemoryFeedbackOptions kOn{};

std::uint64_t need_64_per_byte(std::uint64_t bytes) { return 64 * bytes; }

// A reading of the 1000 MiB device with `used_mib` in use, none of it by running batches.
DeviceMemory used(std::uint64_t used_mib) { return {kTotal, kTotal - used_mib * kMiB, 0}; }

std::uint64_t budget(const DeviceMemory& memory, const MemoryFeedbackOptions& options = kOn) {
  return memory_byte_budget(memory_room_bytes(memory, options, false), kMaxBytes, need_64_per_byte);
}

}  // namespace

TEST_CASE("a device that does not report memory, or feedback off: the full budget") {
  CHECK(memory_room_bytes({}, kOn, false) == kUnlimitedRoom);
  CHECK(budget({}) == kMaxBytes);
  MemoryFeedbackOptions off;
  off.enabled = false;
  CHECK(memory_room_bytes(used(990), off, false) == kUnlimitedRoom);
  CHECK(budget(used(990), off) == kMaxBytes);
}

TEST_CASE("well below the high-water mark: the full budget, while the largest batch fits") {
  // 100 MiB used: room 900 - 100 = 800 MiB; 8 MiB of input needs 512 MiB.
  CHECK(memory_room_bytes(used(100), kOn, false) == static_cast<std::int64_t>(800 * kMiB));
  CHECK(budget(used(100)) == kMaxBytes);
  // 400 MiB used: room 500 MiB, less than the 512 MiB a full batch needs: 7.8125 MiB of input.
  CHECK(budget(used(400)) == 500 * kMiB / 64);
}

TEST_CASE("past the mark's reach the budget shrinks, to 0 at the mark and beyond") {
  CHECK(budget(used(850)) == 50 * kMiB / 64);  // room 50 MiB: 819,200 bytes
  CHECK(budget(used(850)) == 819'200);
  CHECK(budget(used(899)) == 16'384);           // room 1 MiB
  CHECK(memory_room_bytes(used(900), kOn, false) == 0);
  CHECK(budget(used(900)) == 0);
  CHECK(memory_room_bytes(used(950), kOn, false) == -static_cast<std::int64_t>(50 * kMiB));
  CHECK(budget(used(950)) == 0);
  CHECK(budget(used(1000)) == 0);
}

TEST_CASE("the budget recovers as memory frees") {
  const std::uint64_t steps[] = {100, 850, 950, 1000, 899, 850, 400, 100};
  const std::uint64_t expected[] = {kMaxBytes, 819'200, 0, 0, 16'384, 819'200, 8'192'000, kMaxBytes};
  for (std::size_t i = 0; i < std::size(steps); ++i) {
    INFO(steps[i] << " MiB used");
    CHECK(budget(used(steps[i])) == expected[i]);
  }
}

TEST_CASE("memory held by this daemon's running batches counts only where batches overlap") {
  // 850 MiB used, 40 MiB of it by a running batch: on a one-batch-at-a-time device it ends before
  // the next starts (others use 810 MiB: room 90 MiB); with several streams it may not (room 50).
  const DeviceMemory reading{kTotal, 150 * kMiB, 40 * kMiB};
  CHECK(memory_room_bytes(reading, kOn, false) == static_cast<std::int64_t>(90 * kMiB));
  CHECK(memory_room_bytes(reading, kOn, true) == static_cast<std::int64_t>(50 * kMiB));
}

TEST_CASE("other marks, needs and odd readings") {
  MemoryFeedbackOptions full;
  full.high_water = 1.0;
  CHECK(memory_room_bytes(used(900), full, false) == static_cast<std::int64_t>(100 * kMiB));
  MemoryFeedbackOptions half;
  half.high_water = 0.5;
  CHECK(budget(used(450), half) == 50 * kMiB / 64);
  // A batch that needs nothing of its own (cuda) fits even past the mark: holding it frees nothing.
  const auto none = [](std::uint64_t) { return std::uint64_t{0}; };
  CHECK(memory_byte_budget(memory_room_bytes(used(990), kOn, false), kMaxBytes, none) == kMaxBytes);
  CHECK(fits_room(-1, 0));
  CHECK_FALSE(fits_room(-1, 1));
  CHECK(fits_room(5, 5));
  CHECK_FALSE(fits_room(5, 6));
  // A fixed part bigger than the room: not even an empty batch fits.
  const auto fixed_part = [](std::uint64_t bytes) { return 10 * kMiB + bytes; };
  CHECK(memory_byte_budget(static_cast<std::int64_t>(5 * kMiB), kMaxBytes, fixed_part) == 0);
  CHECK(memory_byte_budget(static_cast<std::int64_t>(11 * kMiB), kMaxBytes, fixed_part) == kMiB);
  // More free than total (a confused reading) counts as nothing used.
  CHECK(memory_room_bytes({kTotal, 2 * kTotal, 0}, kOn, false) == static_cast<std::int64_t>(900 * kMiB));
}

// Device-memory feedback: from a device's memory reading, how much memory a batch sent there now
// may take (its room), and the largest batch, in input bytes, whose need fits it (its byte
// budget). A device that reports its memory keeps its used memory at or below a high-water mark:
//
//   room   = floor(high_water x total) - used by others
//            (used by others = total - free, less what this daemon's running batches hold where
//             the device runs one batch at a time: they end before the next one starts)
//   budget = the largest b <= max_bytes with need(b) <= room
//
// so past the mark the budget shrinks, down to 0 (send nothing there), and it grows back as memory
// frees. A batch that needs no memory beyond what the backend holds (cuda: buffers made at start)
// fits anywhere: holding it back would free nothing. Pure functions; docs/POLICY.md, "Device
// memory", has the rule and tests/test_memory_budget.cpp hand-computed cases.
#pragma once

#include <cstdint>
#include <limits>

#include "backend/backend.hpp"

namespace batchd {

struct MemoryFeedbackOptions {
  bool enabled = true;       // off: memory is still read and shown, but nothing is held back
  double high_water = 0.9;   // fraction of a device's memory, in (0, 1]
};

// The room of a device that does not report its memory, or with feedback off.
inline constexpr std::int64_t kUnlimitedRoom = std::numeric_limits<std::int64_t>::max();

// Device bytes a batch sent now may need there; negative when the device is past its mark
// already. batches_overlap: the device runs several of this daemon's batches at once (several
// streams), so those running now still hold their memory when the next one starts.
[[nodiscard]] std::int64_t memory_room_bytes(const DeviceMemory& memory, const MemoryFeedbackOptions& options,
                                             bool batches_overlap) noexcept;

// Whether a batch that needs need_bytes fits a device with this room.
[[nodiscard]] constexpr bool fits_room(std::int64_t room, std::uint64_t need_bytes) noexcept {
  return need_bytes == 0 || (room >= 0 && need_bytes <= static_cast<std::uint64_t>(room));
}

// The largest input-byte count b <= max_bytes with fits_room(room, need(b)); 0 when not even an
// empty batch fits. need: input bytes -> device bytes, non-decreasing. A binary search: about 32
// calls of need for a 4 GiB max_bytes.
template <class Need>
[[nodiscard]] std::uint64_t memory_byte_budget(std::int64_t room, std::uint64_t max_bytes, const Need& need) {
  if (room == kUnlimitedRoom || fits_room(room, need(max_bytes))) return max_bytes;
  if (!fits_room(room, need(0))) return 0;
  std::uint64_t fits = 0;            // need(fits) fits
  std::uint64_t too_big = max_bytes;  // need(too_big) does not
  while (too_big - fits > 1) {
    const std::uint64_t mid = fits + (too_big - fits) / 2;
    (fits_room(room, need(mid)) ? fits : too_big) = mid;
  }
  return fits;
}

}  // namespace batchd

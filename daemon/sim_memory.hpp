// The sim backend's device memory: each simulated device has total_bytes; a batch needs
// per_byte x its input bytes while it runs, charged at its start (a batch that does not fit fails
// like a CUDA out-of-memory, charging nothing) and given back at its end; and another tenant uses a
// share of every device that changes over time, a repeating cycle of linear ramps, so that tests
// and benchmarks can put the memory under pressure. Thread-safe: lanes charge while the watchdog
// reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "base/expected.hpp"

namespace batchd {

// One step of the other tenant's cycle: its share of each device moves in a straight line to
// `percent` over `ms` milliseconds (0: at once).
struct MemoryRamp {
  double percent = 0;
  std::uint32_t ms = 0;
};

// "PERCENT:MS,PERCENT:MS,...", e.g. "80:1000,80:1000,0:1000,0:1000": up to 80 % in 1 s, held for
// 1 s, down in 1 s, held for 1 s, and again. The cycle starts at the last step's percent.
Expected<std::vector<MemoryRamp>> parse_memory_schedule(std::string_view text);

// The other tenant's share, in percent, elapsed_ns after the start. Empty schedule: 0.
double other_percent(const std::vector<MemoryRamp>& schedule, std::int64_t elapsed_ns) noexcept;

class SimMemory {
 public:
  // total_bytes 0: unlimited (nothing is charged or reported).
  SimMemory(unsigned devices, std::uint64_t total_bytes, std::uint64_t per_byte,
            std::vector<MemoryRamp> other);

  [[nodiscard]] bool limited() const noexcept { return total_bytes_ != 0; }
  // What a batch of input_bytes needs while it runs; 0 when unlimited.
  [[nodiscard]] std::uint64_t need(std::uint64_t input_bytes) const noexcept {
    return limited() ? per_byte_ * input_bytes : 0;
  }
  // Charges `need` to the device if it fits beside the other tenant and the batches running there
  // now; if not, charges nothing, fills *seen with what the device had, and returns false.
  bool try_charge(unsigned device, std::uint64_t need, std::int64_t elapsed_ns, DeviceMemory& seen) noexcept;
  void release(unsigned device, std::uint64_t need) noexcept;
  [[nodiscard]] DeviceMemory reading(unsigned device, std::int64_t elapsed_ns) const noexcept;

 private:
  [[nodiscard]] std::uint64_t other_bytes(std::int64_t elapsed_ns) const noexcept;

  std::uint64_t total_bytes_;
  std::uint64_t per_byte_;
  std::vector<MemoryRamp> other_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> in_use_;  // per device: what running batches hold
  unsigned devices_;
};

}  // namespace batchd

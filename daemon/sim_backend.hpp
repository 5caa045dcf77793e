// The sim backend: N simulated GPUs for testing and benchmarking routing, policy and failures on
// machines without one. A device runs one batch at a time and takes
// fixed_us + per_item_us * n + per_byte_ns * bytes; its output for an input is the input's code
// points reversed, repeated `repeat` times (so answers vary in length). Faults by option.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/sim_reference.hpp"

namespace batchd {

struct SimOptions {
  unsigned devices = 2;
  std::uint32_t fixed_us = 2000;
  std::uint32_t per_item_us = 20;
  std::uint32_t per_byte_ns = 0;
  unsigned repeat = 1;
  std::vector<std::pair<unsigned, unsigned>> fail_every;  // (device, K): every K-th batch fails
  std::vector<std::pair<unsigned, double>> slow;          // (device, factor): costs × factor
  std::vector<unsigned> hang_devices;                     // every batch there hangs
  std::uint32_t hang_ms = 600'000;                        // how long a hang lasts (or until shutdown)
  std::string poison_prefix;                              // an input starting with it fails its batch
  std::uint32_t outage_ms = 0;                            // every device fails for this long after start
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimOptions options);

  [[nodiscard]] std::string_view name() const noexcept override { return "sim"; }
  [[nodiscard]] unsigned devices() const noexcept override { return options_.devices; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;
  void shutdown() noexcept override;

 private:
  // Sleeps for ns unless shutdown() comes first; returns false if it did.
  bool sleep_for_ns(std::int64_t ns);
  std::string injected_fault(unsigned device, const BatchInput& in);

  SimOptions options_;
  std::int64_t started_ns_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> batches_run_;  // per device, for fail_every
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutting_down_ = false;  // guarded by mu_
};

}  // namespace batchd

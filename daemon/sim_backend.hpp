// The sim backend: N simulated GPUs for testing and benchmarking routing, policy and failures on
// machines without one. A device runs one batch at a time and takes
// fixed_us + per_item_us * n + per_byte_ns * bytes; its output for an input is the input's code
// points reversed, repeated `repeat` times (so answers vary in length). Faults by option. With
// memory_mib set, each device has that much memory, a batch needs memory_per_byte x its input
// bytes while it runs (one that does not fit fails like a CUDA out-of-memory), and another tenant
// may take a changing share of it (sim_memory.hpp).
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
#include "daemon/sim_memory.hpp"

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
  std::uint32_t load_ms = 0;                              // making the backend takes this long (a model's load)
  std::uint32_t cold_ms = 0;                              // each device's first batch takes this much longer
  std::uint64_t memory_mib = 0;                           // each device's memory; 0: unlimited
  std::uint64_t memory_per_byte = 1024;                   // device bytes a batch needs per input byte
  std::vector<MemoryRamp> memory_other;                   // another tenant's share over time
};

class SimBackend final : public Backend {
 public:
  explicit SimBackend(SimOptions options);

  [[nodiscard]] std::string_view name() const noexcept override { return "sim"; }
  [[nodiscard]] unsigned devices() const noexcept override { return options_.devices; }
  // Every sim model in a daemon runs on the same simulated devices, as models share a GPU.
  [[nodiscard]] std::string_view device_group() const noexcept override { return "sim"; }
  BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) override;
  void shutdown() noexcept override;
  [[nodiscard]] DeviceMemory memory(unsigned device) const noexcept override;
  [[nodiscard]] std::uint64_t batch_memory_bytes(std::size_t inputs, std::uint64_t input_bytes) const noexcept override;

 private:
  // Sleeps for ns unless shutdown() comes first; returns false if it did.
  // Until CLOCK_MONOTONIC reaches until_ns; false when shutting down.
  bool sleep_until_ns(std::int64_t until_ns);
  std::string injected_fault(unsigned device, const BatchInput& in);
  BackendStatus run_charged(unsigned device, const BatchInput& in, BatchOutput& out);

  SimOptions options_;
  std::int64_t started_ns_ = 0;  // after the load's wait: the outage and memory ramps count from it
  std::unique_ptr<std::atomic<std::uint64_t>[]> batches_run_;  // per device, for fail_every
  std::unique_ptr<std::atomic<bool>[]> warm_;                  // per device: its first batch has run (cold_ms)
  SimMemory memory_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutting_down_ = false;  // guarded by mu_
};

}  // namespace batchd

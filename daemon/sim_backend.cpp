#include "daemon/sim_backend.hpp"

#include <sys/prctl.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "shm/futex.hpp"

namespace batchd {

SimBackend::SimBackend(SimOptions options)
    : options_(std::move(options)),
      batches_run_(std::make_unique<std::atomic<std::uint64_t>[]>(std::max(1U, options_.devices))),
      warm_(std::make_unique<std::atomic<bool>[]>(std::max(1U, options_.devices))),
      memory_(options_.devices, options_.memory_mib << 20, options_.memory_per_byte, options_.memory_other) {
  // As a real model's weights take a while to load: the daemon makes backends off its drain
  // thread (model control), and tests see a model in its loading state.
  if (options_.load_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.load_ms));
  started_ns_ = shm::monotonic_ns();
}

DeviceMemory SimBackend::memory(unsigned device) const noexcept {
  return memory_.reading(device, shm::monotonic_ns() - started_ns_);
}

std::uint64_t SimBackend::batch_memory_bytes(std::size_t /*inputs*/, std::uint64_t input_bytes) const noexcept {
  return memory_.need(input_bytes);
}

void SimBackend::shutdown() noexcept {
  {
    std::lock_guard lock(mu_);
    shutting_down_ = true;
  }
  cv_.notify_all();
}

bool SimBackend::sleep_until_ns(std::int64_t until_ns) {
  // A modelled device takes its cost, not its cost plus the kernel's default 50 us of timer
  // slack: that would bill every batch for time no real device spends.
  thread_local const bool tight = ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) == 0;
  (void)tight;
  std::unique_lock lock(mu_);
  for (;;) {
    if (shutting_down_) return false;
    const std::int64_t left_ns = until_ns - shm::monotonic_ns();
    if (left_ns <= 0) return true;
    cv_.wait_for(lock, std::chrono::nanoseconds(left_ns));
  }
}

std::string SimBackend::injected_fault(unsigned device, const BatchInput& in) {
  const std::uint64_t nth = batches_run_[device].fetch_add(1, std::memory_order_relaxed) + 1;
  if (options_.outage_ms != 0 &&
      shm::monotonic_ns() - started_ns_ < static_cast<std::int64_t>(options_.outage_ms) * 1'000'000) {
    return fmt::format("simulated outage of every device (first {} ms)", options_.outage_ms);
  }
  for (const auto& [d, every] : options_.fail_every) {
    if (d == device && every != 0 && nth % every == 0) {
      return fmt::format("simulated fault on device {} (fails every {}th batch)", device, every);
    }
  }
  if (!options_.poison_prefix.empty()) {
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (in.at(i).starts_with(options_.poison_prefix)) {
        return fmt::format("poison input (starts with '{}') in a batch of {}", options_.poison_prefix,
                           in.size());
      }
    }
  }
  return {};
}

BackendStatus SimBackend::run(LaneId lane, const BatchInput& in, BatchOutput& out) {
  const unsigned device = lane.device;
  if (std::find(options_.hang_devices.begin(), options_.hang_devices.end(), device) !=
      options_.hang_devices.end()) {
    sleep_until_ns(shm::monotonic_ns() + static_cast<std::int64_t>(options_.hang_ms) * 1'000'000);
    return BackendStatus::failure(fmt::format("simulated hang on device {}", device));
  }
  const std::uint64_t need = memory_.need(in.size() == 0 ? 0 : in.offsets.back() - in.offsets.front());
  DeviceMemory seen;
  if (!memory_.try_charge(device, need, shm::monotonic_ns() - started_ns_, seen)) {
    return BackendStatus::failure(fmt::format(
        "out of memory: a batch of {} needs {:.1f} MiB on sim device {}, which has {:.1f} of {:.1f} MiB free",
        in.size(), static_cast<double>(need) / (1 << 20), device,
        static_cast<double>(seen.free_bytes) / (1 << 20), static_cast<double>(seen.total_bytes) / (1 << 20)));
  }
  // Given back however the run ends (the router turns a throw into a failed batch).
  struct Charge {
    SimMemory& memory;
    unsigned device;
    std::uint64_t bytes;
    ~Charge() { memory.release(device, bytes); }
  } charge{memory_, device, need};
  return run_charged(device, in, out);
}

// run() once the batch's memory is charged.
BackendStatus SimBackend::run_charged(unsigned device, const BatchInput& in, BatchOutput& out) {
  double factor = 1.0;
  for (const auto& [d, f] : options_.slow) {
    if (d == device) factor = f;
  }
  // A model's lazy initialisation (CUDA's context, a framework's first call): paid once per device.
  const double cold_ns =
      options_.cold_ms != 0 && !warm_[device].exchange(true, std::memory_order_relaxed) ? options_.cold_ms * 1e6 : 0;
  const double cost_ns = (options_.fixed_us * 1e3 + options_.per_item_us * 1e3 * static_cast<double>(in.size()) +
                          options_.per_byte_ns * static_cast<double>(in.bytes.size())) * factor + cold_ns;
  // The answers are made within the modelled time, as a device's work is: the batch takes its
  // cost, not its cost plus this host's time to make them (unless that is longer).
  const std::int64_t start_ns = shm::monotonic_ns();
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::string answer = sim_expected_output(in.at(i), options_.repeat);
    std::copy(answer.begin(), answer.end(), out.append(answer.size()));
  }
  if (!sleep_until_ns(start_ns + static_cast<std::int64_t>(cost_ns))) {
    return BackendStatus::failure("shutting down");
  }
  if (auto fault = injected_fault(device, in); !fault.empty()) return BackendStatus::failure(fault);
  return BackendStatus::success();
}

}  // namespace batchd

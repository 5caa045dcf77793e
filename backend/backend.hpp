// The one interface every backend implements (cpu, sim, cuda, plug-ins): a batch of inputs as
// flat bytes plus offsets in, the same number of outputs out. Routing, completion and failure
// handling are written once against this.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace batchd {

// Inputs of one batch: input i is bytes[offsets[i], offsets[i + 1]).
struct BatchInput {
  std::span<const char> bytes;
  std::span<const std::uint32_t> offsets;  // size() + 1 entries, offsets[0] == 0

  [[nodiscard]] std::size_t size() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
  [[nodiscard]] std::string_view at(std::size_t i) const noexcept {
    return {bytes.data() + offsets[i], offsets[i + 1] - offsets[i]};
  }
};

// Outputs of one batch, in the same layout; reused across batches so that steady state
// allocates nothing.
struct BatchOutput {
  std::vector<char> bytes;
  std::vector<std::uint32_t> offsets{0};

  void clear() noexcept {
    bytes.clear();
    offsets.assign(1, 0);
  }
  [[nodiscard]] std::size_t size() const noexcept { return offsets.size() - 1; }
  [[nodiscard]] std::string_view at(std::size_t i) const noexcept {
    return {bytes.data() + offsets[i], offsets[i + 1] - offsets[i]};
  }
  // Appends room for one output of n bytes and returns where to write it.
  char* append(std::size_t n) {
    bytes.resize(bytes.size() + n);
    offsets.push_back(static_cast<std::uint32_t>(bytes.size()));
    return bytes.data() + bytes.size() - n;
  }
};

// A whole-batch failure; per-input isolation happens above the backend. A device fault says the
// batch is blameless: the device went away under it (a worker process died, hung or broke the
// protocol), so the batch runs again elsewhere without counting as a failure of its inputs.
struct BackendStatus {
  bool ok = true;
  std::string message;
  bool device_fault = false;

  static BackendStatus success() { return {}; }
  static BackendStatus failure(std::string why) { return {false, std::move(why), false}; }
  static BackendStatus device_gone(std::string why) { return {false, std::move(why), true}; }
};

// Where a batch runs: a device, and one of its streams (CUDA streams; CPU worker threads and
// simulated devices have one stream each).
struct LaneId {
  unsigned device = 0;
  unsigned stream = 0;
};

// The largest batch a backend can run. One that sizes buffers at start (cuda: pinned host and
// device memory per lane) states them here; the daemon clamps its batching policy to this at start
// and on every reload, so a policy larger than the buffers never sends batches down the failure
// path.
struct BatchCapacity {
  std::uint32_t max_inputs = UINT32_MAX;
  std::uint64_t max_bytes = UINT64_MAX;
  // The batch per lane that keeps the devices full when every lane runs one (cuda: the kernel's
  // resident threads / streams); 0: the backend knows none. A daemon not told a batch size lets
  // the adaptive policy grow batches up to this (and max_inputs).
  std::uint32_t fill_inputs = 0;
};

// One device's memory, as the backend reports it. total_bytes 0: the backend does not report
// memory (then nothing is held back for it). batch_bytes: of the memory in use, what batches of
// this daemon that are running now hold (what batch_memory_bytes charged for them), so that the
// router can tell them from what others use.
struct DeviceMemory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t batch_bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  // Devices are 0 .. devices() - 1, each with streams_per_device() streams; the router runs at
  // most one batch per (device, stream) at a time.
  [[nodiscard]] virtual unsigned devices() const noexcept = 0;
  [[nodiscard]] virtual unsigned streams_per_device() const noexcept { return 1; }
  // Default: no limit of the backend's own.
  [[nodiscard]] virtual BatchCapacity capacity() const noexcept { return {}; }
  // Which devices these are when other backends in the same process may run on them too (each
  // model the daemon serves has a backend of its own): backends that name the same group run on
  // one set of devices, and the daemon makes their models take turns there. Empty: devices of
  // the backend's own (worker processes, the cpu backend's threads). Default: empty.
  [[nodiscard]] virtual std::string_view device_group() const noexcept { return {}; }
  // A device's place in that group (a CUDA ordinal), for devices 0 .. devices() - 1.
  [[nodiscard]] virtual unsigned device_in_group(unsigned device) const noexcept { return device; }
  // Whether the daemon may run a batch on its drain thread instead of handing it to a lane's
  // worker: run() then must never block, and must be safe to call from any thread at once, even
  // for a lane that is running. The daemon does so only while the measured run time of the
  // batch is a few microseconds, where the hand-off (a thread wake-up) would cost more than the
  // work. Default: no (a GPU launch belongs on its lane).
  [[nodiscard]] virtual bool runs_inline() const noexcept { return false; }

  // Runs one batch on a lane. Thread-safe across distinct lanes. On success `out` holds one
  // output per input; the caller checks the count and treats a mismatch as a backend error. A
  // failure fails the whole batch; the router isolates a failing input by splitting.
  virtual BackendStatus run(LaneId lane, const BatchInput& in, BatchOutput& out) = 0;

  // A device's memory now. Called from the router's watchdog thread (every few tens of
  // milliseconds) and, where memory is reported, from a lane before each run on that device, while
  // other lanes run batches: it must be safe against run() and memory() on any lane and must not
  // block for long. Default: not reported.
  [[nodiscard]] virtual DeviceMemory memory(unsigned /*device*/) const noexcept { return {}; }
  // Device memory a batch of `inputs` inputs and `input_bytes` bytes needs while it runs, beyond
  // what the backend holds anyway; non-decreasing in both. The router sends no batch whose need
  // does not fit a device's room. Called from any thread. Default: 0 (nothing beyond its own).
  [[nodiscard]] virtual std::uint64_t batch_memory_bytes(std::size_t /*inputs*/,
                                                         std::uint64_t /*input_bytes*/) const noexcept {
    return 0;
  }

  // Whether the device is lost for good: its state is corrupt (CUDA's sticky errors), so every
  // later run() there fails and only a new process can use it again. The router stops sending it
  // work; when every device is lost the daemon exits non-zero so that its service manager
  // restarts it. Any thread. Default: devices are never lost (failures are transient).
  [[nodiscard]] virtual bool device_lost(unsigned /*device*/) const noexcept { return false; }

  // How long the largest batch (capacity()) may take on a healthy device, at most: the daemon
  // raises its hang timeout (--device-timeout-ms) to this, so that a costly configuration does
  // not make a working device look hung. 0: no estimate (the timeout stands as configured).
  [[nodiscard]] virtual std::chrono::nanoseconds worst_batch_time() const noexcept { return {}; }

  // A batch on this device ran past the hang timeout (the router already runs it elsewhere). A
  // backend that can replace the device (a worker process) drops it here, so the run returns.
  // Watchdog thread; must not block. Default: nothing (the device is probed after a back-off).
  virtual void device_hung(unsigned /*device*/) noexcept {}

  // The daemon is shutting down: calls blocked in run() should return soon (with any status).
  virtual void shutdown() noexcept {}
};

}  // namespace batchd

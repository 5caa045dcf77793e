// Device-memory feedback in the router: the watchdog reads each device's memory every tick and
// keeps its room and byte budget (memory_budget.hpp has the rule); dispatch sends a batch only to
// a device whose room its need fits, and the lane reads its device's memory again just before the
// run. A batch that fits no available device (it was filled while there was more room, or one
// input is huge), or no longer fits when its lane comes to it:
// - is split, when smaller batches fit somewhere now;
// - runs at once, where the router would send it otherwise, when it could not fit any device even
//   with nothing else there: waiting cannot help, and the failure path (retry, split, isolate)
//   gives the input too big for the devices its own out-of-memory error;
// - else waits in the router until some device has room, checked every watchdog tick, and after
//   device_timeout (as long as a hung batch is given) runs anyway. Its batch object stays taken
//   meanwhile, so a long shortage slows the drain loop down instead of queueing without bound.
// A device short of memory is not unhealthy: it only gets smaller batches, or none for a while.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/batcher.hpp"
#include "daemon/router.hpp"

namespace batchd {

void Router::refresh_memory() noexcept {
  bool limited = false;
  for (unsigned d = 0; d < memory_.size(); ++d) limited = read_memory(d) != kUnlimitedRoom || limited;
  memory_limited_.store(limited, std::memory_order_relaxed);
}

std::int64_t Router::read_memory(unsigned device) noexcept {
  const bool overlap = backend_.streams_per_device() > 1;
  const auto need_of = [this](std::uint64_t bytes) { return backend_.batch_memory_bytes(1, bytes); };
  const DeviceMemory reading = backend_.memory(device);
  const std::int64_t room = memory_room_bytes(reading, options_.memory, overlap);
  MemoryState& m = *memory_[device];
  m.total_bytes.store(reading.total_bytes, std::memory_order_relaxed);
  m.free_bytes.store(reading.free_bytes, std::memory_order_relaxed);
  m.batch_bytes.store(reading.batch_bytes, std::memory_order_relaxed);
  m.room.store(room, std::memory_order_relaxed);
  m.byte_budget.store(memory_byte_budget(room, kMaxBatchBytes, need_of), std::memory_order_relaxed);
  return room;
}

bool Router::fits_at_launch(const Lane& lane, const Batch& batch) noexcept {
  // Dispatch weighed the room of the last tick, up to a tick old, and the batch may have queued
  // behind other runs since: another tenant may have grown meanwhile. Probes run as sent.
  if (batch.shadow) return true;
  const std::uint64_t need = memory_need(batch);
  return need == 0 || fits_room(read_memory(lane.id.device), need);
}

void Router::log_memory() const {
  for (unsigned d = 0; d < memory_.size(); ++d) {
    const MemoryView view = device_memory(d);
    if (view.reading.total_bytes == 0) continue;
    spdlog::info("{} device {}: {:.1f} of {:.1f} MiB free; memory feedback {}", backend_.name(), d,
                 static_cast<double>(view.reading.free_bytes) / (1 << 20),
                 static_cast<double>(view.reading.total_bytes) / (1 << 20),
                 options_.memory.enabled
                     ? fmt::format("on: batches keep it at most {:g} % full", options_.memory.high_water * 100)
                     : std::string("off"));
  }
}

std::uint64_t Router::byte_budget(std::int64_t now_ns) const noexcept {
  if (!memory_limited_.load(std::memory_order_relaxed)) return kMaxBatchBytes;
  std::uint64_t best = 0;
  bool any = false;
  for (unsigned d = 0; d < memory_.size(); ++d) {
    if (!health_[d]->available(now_ns)) continue;
    any = true;
    best = std::max(best, memory_[d]->byte_budget.load(std::memory_order_relaxed));
  }
  return any ? best : kMaxBatchBytes;  // no device at all: dispatch answers, memory aside
}

Router::MemoryView Router::device_memory(unsigned device) const noexcept {
  const MemoryState& m = *memory_[device];
  return {{m.total_bytes.load(std::memory_order_relaxed), m.free_bytes.load(std::memory_order_relaxed),
           m.batch_bytes.load(std::memory_order_relaxed)},
          m.room.load(std::memory_order_relaxed) == kUnlimitedRoom
              ? kMaxBatchBytes
              : m.byte_budget.load(std::memory_order_relaxed)};
}

std::uint64_t Router::memory_need(const Batch& batch) const noexcept {
  if (batch.ignore_memory || !memory_limited_.load(std::memory_order_relaxed)) return 0;
  return backend_.batch_memory_bytes(batch.size(), batch.input_bytes.size());
}

bool Router::fits_memory(const Batch& batch, std::uint64_t need, unsigned device) const noexcept {
  return batch.ignore_memory || fits_room(memory_[device]->room.load(std::memory_order_relaxed), need);
}

void Router::hold_for_memory(Batch* batch, std::int64_t now_ns) noexcept {
  if (batch->size() > 1 && byte_budget(now_ns) > 0) {
    Batch* half = acquire_extra();
    batch->split_into(*half);
    batch->failed_devices = batch->hung_devices = 0;
    half->held_since_ns = batch->held_since_ns;
    dispatch(batch);
    dispatch(half);
    return;
  }
  const std::uint64_t need = memory_need(*batch);
  bool could_fit = false;
  for (unsigned d = 0; d < memory_.size() && !could_fit; ++d) {
    const std::uint64_t total = memory_[d]->total_bytes.load(std::memory_order_relaxed);
    could_fit = health_[d]->available(now_ns) &&
                fits_room(memory_room_bytes({total, total, 0}, options_.memory, false), need);
  }
  if (!could_fit) {
    batch->ignore_memory = true;
    dispatch(batch);
    return;
  }
  if (batch->held_since_ns == 0) batch->held_since_ns = now_ns;
  std::lock_guard lock(held_mu_);
  held_.push_back(batch);
}

void Router::retry_held(std::int64_t now_ns) noexcept {
  held_retry_.clear();
  {
    std::lock_guard lock(held_mu_);
    held_retry_.swap(held_);
  }
  const std::int64_t timeout_ns = device_timeout_ns();
  for (Batch* batch : held_retry_) {
    if (batch->held_for_device) {  // router_devices.cpp: waits for a device, not for memory
      batch->held_for_device = false;
      if (expire_waiting(batch, now_ns)) dispatch(batch);
      continue;
    }
    if (now_ns - batch->held_since_ns >= timeout_ns) {
      spdlog::warn("{}: a batch of {} has waited {} ms for device memory; running it anyway",
                   backend_.name(), batch->size(), options_.device_timeout.count());
      batch->ignore_memory = true;
    }
    dispatch(batch);
  }
}

}  // namespace batchd

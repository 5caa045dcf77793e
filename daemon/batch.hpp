// A batch as it travels from the drain loop to a backend lane and on to the completer. Batch
// objects are pooled and cleared, never freed, so their buffers keep their capacity.
#pragma once

#include <atomic>
#include <cstring>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "daemon/arena_vector.hpp"
#include "daemon/client_session.hpp"
#include "daemon/input_arena.hpp"
#include "shm/trace_context.hpp"

namespace batchd {

class Coalescer;

// Where one request's answer goes.
struct RequestRef {
  std::shared_ptr<ClientSession> session;  // keeps the segment mapped until the answer is written
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  std::int64_t deadline_mono_ns = 0;
  std::uint64_t request_id = 0;  // the client's own name for it (0: none); the dead-letter log's key
  // For the queue-time histogram: when the drain loop took it, and the class its client asked for.
  std::int64_t arrival_ns = 0;
  shm::WirePriority priority = shm::WirePriority::kNormal;
  // Its model's id, for that model's counters (kNoModel: an id no model has).
  static constexpr std::uint32_t kNoModel = ~0U;
  std::uint32_t model = kNoModel;
  std::uint32_t cache_scope = 0;  // the caller's trust domain in its client's cache (TakenRequest)
  // For a cached model: the epoch its cache was looked in under, and its key's hash there, so the
  // answer is stored without hashing the input again (0: not looked up).
  std::uint32_t cache_epoch = 0;
  std::uint64_t cache_hash = 0;
  // Set while it leads identical requests that wait for its answer (daemon/coalescer.hpp): its
  // entry's token there, and where that is.
  std::uint64_t lead = 0;
  Coalescer* coalescer = nullptr;
  // Traced when its trace id is set (daemon/request_tracer.hpp): the span id is its parent's, the
  // caller's (zero: a root, the daemon's own sample).
  shm::TraceContext trace{};
};

// When a batched request's run may be given up for want of anyone waiting: its own deadline, or,
// while it leads, the latest of those waiting for it (0: never; daemon/coalescer.cpp).
[[nodiscard]] std::int64_t expire_ns(const RequestRef& request);

// A batch's place in its current run, packed with the run's token so that a watchdog acting on
// a stale view of a reused batch object cannot touch the new run (compare-and-swap on both).
enum class RunPhase : std::uint64_t { kQueued = 0, kRunning = 1, kFinished = 2, kAbandoned = 3 };
constexpr std::uint64_t make_run_state(std::uint64_t token, RunPhase phase) noexcept {
  return (token << 2) | static_cast<std::uint64_t>(phase);
}

struct Batch {
  std::uint64_t id = 0;
  std::int64_t opened_ns = 0;         // arrival of its oldest request
  // Private copies of the inputs, back to back, and where each ends (the first entry 0): in the
  // batch's input-arena slot when it has one (worker processes read them there), else the heap.
  ArenaVector<char> input_bytes;
  ArenaVector<std::uint32_t> input_offsets;
  std::vector<RequestRef> requests;
  BatchOutput output;

  // Routing: which devices this exact batch already failed on, and the last failure's message.
  std::uint64_t failed_devices = 0;
  std::uint64_t hung_devices = 0;  // of those, where it ran past the hang timeout
  std::string last_error;
  std::uint64_t run_token = 0;  // bumped on every dispatch
  // Device memory (router_memory.cpp): since when the router has held it back for want of room
  // (0: not held), and whether it runs now whatever the memory says (it waited long enough).
  std::int64_t held_since_ns = 0;
  bool ignore_memory = false;
  bool held_for_device = false;  // waits for a device to arrive (RouterOptions::wait_for_devices)
  // Devices that went away under this batch (router_devices.cpp): past a few, the batch itself is
  // suspected of killing them (an input that crashes the model).
  unsigned device_faults = 0;
  // A probe (router_pick.cpp): a copy of some requests sent to a device that is far slower than
  // the pool, only to measure it; its answer is dropped (the original is answered elsewhere), and a
  // failure or a redirect drops it too.
  bool shadow = false;
  // A warm-up run (a shadow too): the device it warms, whose lanes take requests once every such
  // batch of it is released (Router::warm_up).
  static constexpr std::uint32_t kNoWarmup = ~0U;
  std::uint32_t warms_device = kNoWarmup;
  // Its last run: when it started, and where (daemon/request_tracer.hpp).
  std::int64_t run_started_ns = 0;
  std::uint32_t run_device = 0;
  std::atomic<std::uint64_t> run_state{0};
  // While a run is abandoned: the watchdog copying it and the lane returning from it each hold it;
  // the last to let go returns it to the pool (Router::let_go_of_abandoned).
  std::atomic<int> abandon_holds{0};

  Batch() { input_offsets.assign_one(0); }

  // Gives the batch its input-arena slot. Precondition: empty.
  void place_in(const InputArena::Slot& slot) {
    input_bytes.place_in(slot.bytes, slot.bytes_capacity);
    input_offsets.place_in(slot.offsets, slot.offsets_capacity);
    input_offsets.assign_one(0);
  }

  [[nodiscard]] BatchInput input() const noexcept { return {input_bytes, input_offsets}; }

  // Appends an input and where its answer goes.
  void append(std::string_view in, RequestRef request) {
    input_bytes.append(in.data(), in.size());
    input_offsets.push_back(static_cast<std::uint32_t>(input_bytes.size()));
    requests.push_back(std::move(request));
  }
  [[nodiscard]] std::size_t size() const noexcept { return requests.size(); }

  void clear() noexcept {
    input_bytes.clear();
    input_offsets.clear();
    input_offsets.push_back(0);  // within the capacity clear() keeps: cannot throw
    requests.clear();  // drops the session references
    output.clear();
    failed_devices = 0;
    hung_devices = 0;
    last_error.clear();
    held_since_ns = 0;
    ignore_memory = false;
    held_for_device = false;
    device_faults = 0;
    shadow = false;
    warms_device = kNoWarmup;
    run_started_ns = 0;
    run_device = 0;
  }

  // Moves the requests whose deadline has passed by now_ns into `other` (empty); both keep their
  // order. Returns how many moved. The kept ones close up in place: each is read before anything
  // is written over it, as they only ever move toward the front.
  std::size_t move_expired_into(Batch& other, std::int64_t now_ns) {
    std::size_t kept = 0;
    std::uint32_t kept_end = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const std::string_view in = input().at(i);
      const std::int64_t deadline = expire_ns(requests[i]);
      if (deadline != 0 && deadline <= now_ns) {
        other.append(in, std::move(requests[i]));
        continue;
      }
      if (kept != i) {
        // A batch never placed in the arena has no storage until its first byte: no null to memmove.
        if (!in.empty()) std::memmove(input_bytes.data() + kept_end, in.data(), in.size());
        requests[kept] = std::move(requests[i]);
      }
      kept_end += static_cast<std::uint32_t>(in.size());
      input_offsets[++kept] = kept_end;
    }
    other.opened_ns = opened_ns;
    input_bytes.truncate(kept_end);
    input_offsets.truncate(kept + 1);
    requests.resize(kept);
    return other.requests.size();
  }

  // Moves the second half of this batch's requests into `other` (empty); both keep their order.
  void split_into(Batch& other) {
    const std::size_t keep = size() / 2;
    const std::uint32_t cut = input_offsets[keep];
    other.input_bytes.assign(input_bytes.data() + cut, input_bytes.size() - cut);
    other.input_offsets.assign_one(0);
    for (std::size_t i = keep + 1; i < input_offsets.size(); ++i) {
      other.input_offsets.push_back(input_offsets[i] - cut);
    }
    other.requests.assign(std::make_move_iterator(requests.begin() + static_cast<std::ptrdiff_t>(keep)),
                          std::make_move_iterator(requests.end()));
    other.opened_ns = opened_ns;
    other.device_faults = device_faults;
    input_bytes.truncate(cut);
    input_offsets.truncate(keep + 1);
    requests.resize(keep);
    ignore_memory = false;  // each half is smaller: it may fit now
  }

  // Makes `other` (empty) a copy of this batch's work, to run it again elsewhere.
  void copy_into(Batch& other) const {
    other.input_bytes.assign(input_bytes.data(), input_bytes.size());
    other.input_offsets.assign(input_offsets.data(), input_offsets.size());
    other.requests = requests;
    other.opened_ns = opened_ns;
    other.failed_devices = failed_devices;
    other.hung_devices = hung_devices;
    other.last_error = last_error;
    other.ignore_memory = ignore_memory;
    other.device_faults = device_faults;
    other.shadow = shadow;
  }
};

}  // namespace batchd

// The client's side of one attachment to one daemon: the mapped segment and the bookkeeping of
// its slots, plus where each submitted request lives. A client holds the current attachment and
// keeps a replaced one alive while a request still reads an answer from it.
#pragma once

#include <boost/interprocess/mapped_region.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client_lib/attach.hpp"
#include "client_lib/attempt.hpp"
#include "client_lib/client.hpp"
#include "shm/cache_reader.hpp"
#include "shm/fd.hpp"
#include "shm/layout.hpp"
#include "shm/ring.hpp"
#include "shm/segment_view.hpp"
#include "shm/status_page.hpp"

namespace batchd::client_detail {

// What a slot is used for.
enum class Use : std::uint8_t { kFree, kSync, kAsync, kAbandoned };

struct Request;

inline constexpr std::uint32_t kNoAsync = 0xFFFFFFFFU;
inline constexpr std::uint32_t kModelUnresolved = 0xFFFFFFFFU;

// The client's bookkeeping for one slot of one segment.
struct SlotState {
  std::uint32_t generation = 0;
  Use use = Use::kFree;
  bool pushed = false;          // published through the ring (a daemon may hold it)
  Request* waiter = nullptr;    // the sync caller's request, so a reattach can move it
  // Where the slot's asynchronous request sits in ClientImpl::async_ (kNoAsync: none), so an
  // entry of the daemon's finished list leads straight to it.
  std::uint32_t async_index = kNoAsync;
};

// Everything that belongs to one attachment to one daemon. A client holds the current one and
// keeps a replaced one alive while a request still reads an answer from it.
struct Segment {
  std::uint64_t epoch = 0;  // 1 for the first attachment, +1 per reattach
  shm::UniqueFd connection, request_fd, completion_fd, doorbell_fd, status_fd;
  boost::interprocess::mapped_region request_map, completion_map, status_map;
  // The daemon's response caches for this client (shm/cache_reader.hpp): its user's and the one
  // every user shares. A reader left invalid (a segment this build cannot read) only misses.
  shm::UniqueFd user_cache_fd, shared_cache_fd;
  boost::interprocess::mapped_region user_cache_map, shared_cache_map;
  shm::CacheReader user_cache, shared_cache;
  shm::SegmentView view;
  const shm::DaemonStatusPage* status = nullptr;
  std::size_t status_bytes = 0;  // mapped at status: the page, and the histograms if the daemon has them
  // Set by the monitor once the daemon's connection closed; never cleared.
  std::atomic<bool> dead{false};

  // Guarded by ClientImpl::mu_.
  shm::RingProducer producer;
  bool staged = false;  // entries written since the last publish()
  std::uint64_t finished_head = 0;  // how far poll() has read the daemon's finished list
  std::vector<SlotState> slots;
  std::vector<std::uint32_t> free, abandoned;
  // This daemon's id for each model name the client used, by the client's index (see
  // ClientImpl::model_names_): kModelUnresolved until a request needs it.
  std::vector<std::uint32_t> model_ids;

  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept {
    return view.geometry().params.max_input_bytes;
  }
  [[nodiscard]] bool slot_done(std::uint32_t slot, std::uint32_t generation) const noexcept {
    return view.completion_slot(slot)->state.load(std::memory_order_acquire) ==
           shm::make_state(generation, shm::SlotPhase::kDone);
  }
  [[nodiscard]] Result read_result(std::uint32_t slot) const;
  // Copies the cached answer to `input` for model id `model` and the caller's `scope` into `out`;
  // false on a miss. Counts a hit, and the time it took, in the client's own counters (shm::
  // CacheHitCounts). Guarded by ClientImpl::mu_ (the counters' one writer).
  [[nodiscard]] bool cached_answer(std::uint32_t model, std::uint32_t scope, std::string_view input,
                                   std::string& out);
  static constexpr std::uint32_t kHitTimingEvery = 16;
  std::uint32_t lookups = 0;  // cached_answer's, guarded by ClientImpl::mu_
  // Starts the slot's next generation and writes a request into it (not yet published): every
  // field the daemon reads, so nothing of the slot's last request is left (request_id and model:
  // the request's, see Request). Returns the new generation. Guarded by ClientImpl::mu_.
  std::uint32_t write_request(std::uint32_t slot, const void* input, std::uint32_t bytes,
                              std::int64_t deadline_ns, shm::WirePriority priority, Use use,
                              std::uint64_t request_id = 0, std::uint32_t model = 0,
                              std::uint32_t cache_scope = 0, const shm::TraceContext& trace = {}) noexcept;
  // Queues a written slot for the daemon, unless the daemon is gone: then the request waits in
  // its slot for the reattach to move it. False only when the ring is full. Nothing is visible to
  // the daemon until publish(). Guarded by ClientImpl::mu_.
  [[nodiscard]] bool stage(std::uint32_t slot) noexcept;
  // Makes every staged slot visible at once, ringing the doorbell at most once (only if the
  // drain loop sleeps). Guarded by ClientImpl::mu_.
  void publish() noexcept;
  void ring_doorbell_if_sleeping() const noexcept;
  [[nodiscard]] bool reclaim_abandoned() noexcept;
  // Appends the entries the daemon's finished list gained since the last call to `out` (slots in
  // range only). False when entries were lost (the client fell more than the list's capacity
  // behind): then only a look at every request is sure.
  [[nodiscard]] bool collect_finished(std::vector<shm::RingEntry>& out);};

// Where a request lives now. The monitor rewrites it (under the client's mutex) when it moves
// the request to a new daemon's segment.
struct Location {
  std::shared_ptr<Segment> segment;
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
};

// One submitted request: on a sync caller's stack, or in the client's async list.
struct Request {
  Location at;
  std::int64_t deadline_ns = 0;
  shm::WirePriority priority = shm::WirePriority::kNormal;  // kept for a move to a new daemon
  // Its name on the wire, the same in every daemon it is moved to (shm::RequestSlotHeader): set
  // when first written (next_request_id()).
  std::uint64_t request_id = 0;
  std::uint32_t model = 0;  // its model's id in its segment's daemon (shm::RequestSlotHeader)
  std::uint32_t cache_scope = 0;  // RequestOptions::cache_scope, kept for a move to a new daemon
  shm::TraceContext trace{};      // RequestOptions::trace, likewise
  // Its model's name, by the client's index (ClientImpl::model_names_; 0: the default model):
  // a move to a restarted daemon looks the id up again there.
  std::uint16_t model_name = 0;
  std::optional<Error> failure;  // set when a reattach could not move it
  bool cached = false;  // answered from the response cache: it holds no slot
};

struct AsyncRequest : Request {
  Client::Callback done;
  std::uint64_t id = 0;  // for cancel()
};

// The class as the daemon reads it from a request slot, and back (client_lib/priority.cpp).
shm::WirePriority wire_priority(Priority priority) noexcept;
Priority priority_of(shm::WirePriority wire) noexcept;
// A request id no other request of this process has, and, from a random start, unlikely to be
// another process's: never 0. Thread-safe.
std::uint64_t next_request_id() noexcept;
// CLOCK_MONOTONIC now plus timeout, saturated: a caller may ask to wait "forever".
std::int64_t deadline_after(std::chrono::milliseconds timeout) noexcept;
// The Result a completion slot's status and payload mean.
Result result_from_wire(shm::WireStatus status, std::string payload);
// Adds one to an eventfd (wakes whoever reads or polls it).
void signal_eventfd(int fd) noexcept;
// Maps and checks the segment an attach handed over, or says why it is unusable.
Attempt<std::shared_ptr<Segment>> make_segment(Attachment attachment, std::uint64_t epoch);

}  // namespace batchd::client_detail

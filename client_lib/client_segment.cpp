#include "client_lib/client_segment.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <random>

#include "shm/futex.hpp"
#include "shm/layout.hpp"
#include "shm/memfd_region.hpp"
#include "shm/untrusted.hpp"

namespace batchd::client_detail {

Result result_from_wire(shm::WireStatus status, std::string payload) {
  switch (status) {
    case shm::WireStatus::kOk: return Result::success(std::move(payload));
    case shm::WireStatus::kTooLarge: return Result::failure(ErrorCode::kTooLarge, std::move(payload));
    case shm::WireStatus::kInvalidUtf8:
      return Result::failure(ErrorCode::kInvalidUtf8, std::move(payload));
    case shm::WireStatus::kTimeout: return Result::failure(ErrorCode::kTimeout, std::move(payload));
    case shm::WireStatus::kOverloaded:
      return Result::failure(ErrorCode::kOverloaded, std::move(payload));
    case shm::WireStatus::kBackendError:
      return Result::failure(ErrorCode::kBackendError, std::move(payload));
    case shm::WireStatus::kCancelled: return Result::failure(ErrorCode::kCancelled, std::move(payload));
    case shm::WireStatus::kBackendUnavailable:
      return Result::failure(ErrorCode::kBackendUnavailable, std::move(payload));
    case shm::WireStatus::kUnknownModel:
      return Result::failure(ErrorCode::kUnknownModel, std::move(payload));
  }
  return Result::failure(ErrorCode::kProtocolError,
                         fmt::format("daemon wrote unknown status {}", static_cast<unsigned>(status)));
}

void signal_eventfd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
}


std::int64_t deadline_after(std::chrono::milliseconds timeout) noexcept {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t now_ns = shm::monotonic_ns();
  const std::int64_t ms = std::max<std::int64_t>(0, timeout.count());
  if (ms > (kMax - now_ns) / 1'000'000) return kMax;
  return now_ns + ms * 1'000'000;
}

std::uint64_t next_request_id() noexcept {
  static std::atomic<std::uint64_t> next{[]() noexcept {
    try {
      std::random_device entropy;
      return (std::uint64_t{entropy()} << 32) | entropy();
    } catch (...) {  // no entropy source: the clock and the pid still set processes apart
      return static_cast<std::uint64_t>(shm::monotonic_ns()) ^ (std::uint64_t(::getpid()) << 40);
    }
  }()};
  std::uint64_t id = 0;
  while (id == 0) id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

std::uint32_t Segment::write_request(std::uint32_t slot, const void* input, std::uint32_t bytes,
                                     std::int64_t deadline_ns, shm::WirePriority priority, Use use,
                                     std::uint64_t request_id, std::uint32_t model,
                                     std::uint32_t cache_scope, const shm::TraceContext& trace) noexcept {
  SlotState& state = slots[slot];
  state.generation = state.generation % shm::kGenerationMask + 1;
  state.use = use;
  state.pushed = false;
  state.waiter = nullptr;
  state.async_index = kNoAsync;
  shm::RequestSlotHeader& header = *view.request_slot(slot);
  header.input_bytes = bytes;
  header.deadline_mono_ns = deadline_ns;
  header.priority = static_cast<std::uint32_t>(priority);
  header.request_id = request_id;
  header.model = model;
  header.cache_scope = cache_scope;
  std::memcpy(header.trace_id, trace.trace_id.data(), sizeof header.trace_id);
  std::memcpy(&header.trace_parent, trace.span_id.data(), sizeof header.trace_parent);
  // A withdrawal mark left by an earlier generation of this slot would otherwise match again
  // once the 24-bit generation wraps, and withdraw this request.
  header.cancel_generation.store(0, std::memory_order_relaxed);
  header.notify.store(use == Use::kAsync ? shm::kNotifyEventfd : 0U, std::memory_order_relaxed);
  if (bytes > 0) std::memcpy(view.request_input(slot), input, bytes);
  return state.generation;
}

Result Segment::read_result(std::uint32_t slot) const {
  const shm::CompletionSlotHeader& header = *view.completion_slot(slot);
  const std::uint32_t bytes = header.output_bytes;
  if (bytes > view.geometry().params.max_output_bytes) {
    return Result::failure(ErrorCode::kProtocolError,
                           fmt::format("daemon wrote an answer of {} bytes into a {}-byte slot", bytes,
                                       view.geometry().params.max_output_bytes));
  }
  std::string payload(reinterpret_cast<const char*>(view.completion_output(slot)), bytes);
  return result_from_wire(static_cast<shm::WireStatus>(header.status), std::move(payload));
}

bool Segment::stage(std::uint32_t slot) noexcept {
  if (dead.load(std::memory_order_acquire)) return true;
  if (!producer.try_stage(shm::make_ring_entry(slot, slots[slot].generation))) return false;
  slots[slot].pushed = true;
  staged = true;
  return true;
}

void Segment::publish() noexcept {
  if (!staged) return;
  staged = false;
  producer.publish();
  ring_doorbell_if_sleeping();
}

void Segment::ring_doorbell_if_sleeping() const noexcept {
  // seq_cst after the seq_cst tail store: pairs with the drain loop raising drain_sleeping and
  // then re-reading the rings, so either it sees this request or this sees it asleep.
  if (status->drain_sleeping.load(std::memory_order_seq_cst) != 0) signal_eventfd(doorbell_fd.get());
}

bool Segment::reclaim_abandoned() noexcept {
  bool any = false;
  for (std::size_t i = 0; i < abandoned.size();) {
    const std::uint32_t slot = abandoned[i];
    if (slot_done(slot, slots[slot].generation)) {
      slots[slot].use = Use::kFree;
      free.push_back(slot);
      abandoned[i] = abandoned.back();
      abandoned.pop_back();
      any = true;
    } else {
      ++i;
    }
  }
  return any;
}

bool Segment::collect_finished(std::vector<shm::RingEntry>& out) {
  const shm::FinishedTail& list = *view.finished_tail();
  const std::uint64_t capacity = view.finished_capacity();
  const std::uint64_t tail = list.tail.load(std::memory_order_acquire);
  const std::uint64_t from = finished_head;
  finished_head = tail;
  if (tail - from > capacity) return false;  // also a tail behind us: a daemon bug, so look everywhere
  const shm::RingEntry* entries = view.finished_entries();
  for (std::uint64_t p = from; p != tail; ++p) {
    const shm::RingEntry entry = shm::load_once(entries[p & (capacity - 1)]);
    if (shm::ring_entry_slot(entry) < slots.size()) out.push_back(entry);
  }
  // Entries overwritten while they were read are caught here; a wrong entry is harmless anyway
  // (poll() checks the slot's state), but a lost one must send poll() to look everywhere.
  return list.tail.load(std::memory_order_acquire) - from <= capacity;
}

bool Segment::cached_answer(std::uint32_t model, std::uint32_t scope, std::string_view input,
                            std::string& out) {
  if (user_cache.epoch(model) == 0 && shared_cache.epoch(model) == 0) return false;  // not cached: no clock
  // A clock read costs a fifth of a hit here: one lookup in kHitTimingEvery is timed, and its time
  // counts for that many.
  const bool timed = lookups++ % kHitTimingEvery == 0;
  const std::int64_t start_ns = timed ? shm::monotonic_ns() : 0;
  if (!user_cache.lookup(model, scope, input, out) && !shared_cache.lookup(model, scope, input, out)) return false;
  // One writer: the client's mutex is held; the daemon only reads.
  shm::CacheHitCounts& counts = *view.cache_hits();
  counts.hits[model].store(counts.hits[model].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (timed) {
    const auto ns = static_cast<std::uint64_t>(shm::monotonic_ns() - start_ns) * kHitTimingEvery;
    counts.hit_ns[model].store(counts.hit_ns[model].load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
  }
  return true;
}

namespace {

Error unmappable(const Failure& failure) {
  return {ErrorCode::kProtocolError, "cannot map the daemon's segment: " + failure.message};
}

// Maps the regions of a fresh attachment and checks the daemon's header.
Attempt<void> map_segment(Segment& seg) {
  const Expected<std::uint64_t> req_bytes = shm::file_bytes(seg.request_fd.get());
  const Expected<std::uint64_t> comp_bytes = shm::file_bytes(seg.completion_fd.get());
  const Expected<std::uint64_t> status_bytes = shm::file_bytes(seg.status_fd.get());
  if (!req_bytes || !comp_bytes || !status_bytes || *req_bytes < sizeof(shm::SegmentHeader) ||
      *comp_bytes == 0 || *status_bytes < shm::kStatusPageBytes) {
    return Error{ErrorCode::kProtocolError, "daemon sent segment files too small to hold a header"};
  }
  auto request_map = shm::map_fd(seg.request_fd.get(), *req_bytes, true);
  if (!request_map) return unmappable(request_map.error());
  seg.request_map = std::move(*request_map);
  // Read-only: the daemon sealed this region against writable mappings.
  auto completion_map = shm::map_fd(seg.completion_fd.get(), *comp_bytes, false);
  if (!completion_map) return unmappable(completion_map.error());
  seg.completion_map = std::move(*completion_map);
  // Up to what this build knows of: the page and the histograms after it; an older daemon's file
  // is the page alone.
  seg.status_bytes = static_cast<std::size_t>(std::min<std::uint64_t>(*status_bytes, shm::kStatusFileBytes));
  auto status_map = shm::map_fd(seg.status_fd.get(), seg.status_bytes, false);
  if (!status_map) return unmappable(status_map.error());
  seg.status_map = std::move(*status_map);
  shm::SegmentHeader header{};
  std::memcpy(&header, seg.request_map.get_address(), sizeof(header));
  const Expected<shm::Geometry> geometry = shm::validate_header(header, *req_bytes, *comp_bytes);
  if (!geometry) {
    return Error{ErrorCode::kProtocolError, "daemon's segment refused: " + geometry.error().message};
  }
  seg.view = shm::SegmentView(*geometry, seg.request_map.get_address(),
                              seg.completion_map.get_address());
  seg.status = static_cast<const shm::DaemonStatusPage*>(seg.status_map.get_address());
  return {};
}

// Maps a response-cache segment read-only (the daemon sealed it so). One that cannot be mapped
// or read leaves the reader invalid: every lookup then misses, and requests go to the daemon.
void map_cache(int fd, boost::interprocess::mapped_region& map, shm::CacheReader& reader) {
  const Expected<std::uint64_t> bytes = shm::file_bytes(fd);
  if (!bytes || *bytes < sizeof(shm::CacheHeader)) return;
  auto mapped = shm::map_fd(fd, *bytes, false);
  if (!mapped) return;
  Expected<shm::CacheReader> opened = shm::CacheReader::open(mapped->get_address(), *bytes);
  if (!opened) return;
  map = std::move(*mapped);
  reader = *opened;
}

}  // namespace

// Allocation is the only failure left to catch: mapping failures come back as values.
Attempt<std::shared_ptr<Segment>> make_segment(Attachment attachment, std::uint64_t epoch) {
  try {
    auto seg = std::make_shared<Segment>();
    seg->epoch = epoch;
    seg->connection = std::move(attachment.connection);
    seg->request_fd = std::move(attachment.fds[shm::kRequestRegionFd]);
    seg->completion_fd = std::move(attachment.fds[shm::kCompletionRegionFd]);
    seg->doorbell_fd = std::move(attachment.fds[shm::kDoorbellFd]);
    seg->status_fd = std::move(attachment.fds[shm::kStatusPageFd]);
    seg->user_cache_fd = std::move(attachment.fds[shm::kUserCacheFd]);
    seg->shared_cache_fd = std::move(attachment.fds[shm::kSharedCacheFd]);
    if (auto mapped = map_segment(*seg); !mapped) return mapped.error();
    map_cache(seg->user_cache_fd.get(), seg->user_cache_map, seg->user_cache);
    map_cache(seg->shared_cache_fd.get(), seg->shared_cache_map, seg->shared_cache);
    const std::uint32_t slots = seg->view.slot_count();
    seg->producer = shm::RingProducer(seg->view.ring_tail(), seg->view.ring_entries(),
                                      seg->view.completion_header(), slots);
    seg->slots.resize(slots);
    seg->free.reserve(slots);
    seg->abandoned.reserve(slots);
    for (std::uint32_t i = slots; i-- > 0;) seg->free.push_back(i);
    return seg;
  } catch (const std::exception& e) {
    return Error{ErrorCode::kProtocolError,
                 std::string("cannot set up the daemon's segment: ") + e.what()};
  }
}

}  // namespace batchd::client_detail

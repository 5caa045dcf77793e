// The per-client shared-memory layout: one request region the client writes and one completion
// region only the daemon writes. Everything here is plain data at fixed offsets; the daemon keeps
// its own copy of the geometry and never reads the header back.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/expected.hpp"
#include "shm/align.hpp"

namespace batchd::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x3144484354414221ULL;  // "!BATCHD1"
// Bump on any incompatible change to the structs below; a mismatch is refused.
// 4: CacheHitCounts after the EventWaiter.
inline constexpr std::uint32_t kLayoutVersion = 4;
// Slot and ring limits keep every product in 64 bits and every index in 32.
inline constexpr std::uint32_t kMaxSlots = 1U << 16;
inline constexpr std::uint32_t kMaxPayloadBytes = 16U << 20;
// The generation lives in the top 24 bits of a 32-bit state word.
inline constexpr std::uint32_t kGenerationMask = (1U << 24) - 1;

// What a completion slot currently holds, in the low 8 bits of its state word.
enum class SlotPhase : std::uint32_t { kIdle = 0, kClaimed = 1, kDone = 2 };

constexpr std::uint32_t make_state(std::uint32_t generation, SlotPhase phase) noexcept {
  return (generation << 8) | static_cast<std::uint32_t>(phase);
}
constexpr std::uint32_t state_generation(std::uint32_t state) noexcept { return state >> 8; }
constexpr SlotPhase state_phase(std::uint32_t state) noexcept {
  return static_cast<SlotPhase>(state & 0xFFU);
}

// Outcome of one request as written by the daemon into its completion slot.
enum class WireStatus : std::uint32_t {
  kOk = 0,
  kTooLarge = 1,
  kInvalidUtf8 = 2,
  kTimeout = 3,
  kOverloaded = 4,
  kBackendError = 5,
  kCancelled = 6,
  kBackendUnavailable = 7,
  kUnknownModel = 8,  // the request's model id names no model the daemon serves
};

// A request's priority class as the client writes it into its request slot. Normal is 0, so a
// slot whose priority nobody wrote (memfd pages start zeroed) asks for nothing special.
enum class WirePriority : std::uint32_t { kNormal = 0, kHigh = 1, kLow = 2 };
inline constexpr std::uint32_t kWirePriorities = 3;  // any value from here on is a protocol violation

// A class's rank: the order classes are served and listed in (high 0, normal, low). A value past
// the known ones ranks as normal.
constexpr std::size_t rank_of(WirePriority priority) noexcept {
  switch (priority) {
    case WirePriority::kHigh: return 0;
    case WirePriority::kLow: return 2;
    case WirePriority::kNormal: break;
  }
  return 1;
}

// Request-slot notify bits: how the caller wants to learn of its completion.
inline constexpr std::uint32_t kNotifyFutex = 1U << 0;
inline constexpr std::uint32_t kNotifyEventfd = 1U << 1;

struct alignas(kCacheLine) SegmentHeader {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t header_bytes;
  std::uint32_t slot_count;
  std::uint32_t max_input_bytes;
  std::uint32_t max_output_bytes;
  std::uint32_t reserved;
  std::uint64_t request_region_bytes;
  std::uint64_t completion_region_bytes;
  std::uint64_t ring_offset;
  std::uint64_t request_slots_offset;
  std::uint64_t request_slot_stride;
  std::uint64_t completion_slots_offset;
  std::uint64_t completion_slot_stride;
};

// Written only by the client: set while its event waker sleeps on CompletionEvents::sequence, so
// the daemon pays for a FUTEX_WAKE only then. The daemon reads it as a hint: any value is safe.
struct alignas(kCacheLine) EventWaiter {
  std::atomic<std::uint32_t> sleeping;
};

// Written only by the client (request region): what its own response-cache lookups answered
// (shm/cache_layout.hpp), by model id, for the daemon's metrics: hits and the time they took.
// The daemon reads them as hints: a client can misreport only itself.
inline constexpr std::uint32_t kCacheHitModels = 64;  // shm::kCacheModels
struct alignas(kCacheLine) CacheHitCounts {
  std::atomic<std::uint64_t> hits[kCacheHitModels];
  std::atomic<std::uint64_t> hit_ns[kCacheHitModels];
};

// Written only by the daemon (completion region): bumped once per batch that answered requests
// flagged kNotifyEventfd. The client's own waker thread sleeps on it and signals the client's
// eventfd. The daemon holds no descriptor of the client's to signal: a client can change the
// flags of any open file description it shares, so one it shared could be made to block.
struct alignas(kCacheLine) CompletionEvents {
  std::atomic<std::uint32_t> sequence;
};

// Written only by the daemon (completion region): the producer position of the finished list,
// which names each answered asynchronous request (kNotifyEventfd) as a RingEntry, so that the
// client's poll() looks at those instead of at every request in flight. Only a hint, checked
// against the slot's state: the list holds kFinishedPerSlot x slot_count entries and the daemon
// never waits for the client, so a client that falls further behind loses entries (it sees the
// tail more than the capacity ahead of its own position) and looks at every slot once instead.
struct alignas(kCacheLine) FinishedTail {
  std::atomic<std::uint64_t> tail;
};
inline constexpr std::uint32_t kFinishedPerSlot = 2;

// Written only by the client; holds the producer position of the submission ring.
struct alignas(kCacheLine) RingTail {
  std::atomic<std::uint64_t> tail;
};

// Written only by the daemon (it lives in the completion region, read-only for the client), so a
// client can neither corrupt the consumer position nor make the daemon re-read it.
struct alignas(kCacheLine) CompletionHeader {
  std::atomic<std::uint64_t> ring_head;
};

// Per-request fields the client writes before publishing the slot index through the ring. The
// input bytes follow the header within the slot's stride.
struct alignas(kCacheLine) RequestSlotHeader {
  std::uint32_t input_bytes;
  std::atomic<std::uint32_t> notify;       // kNotify* bits; the futex bit is set only while waiting
  std::atomic<std::uint32_t> cancel_generation;  // equal to the slot's generation: withdrawn
  // WirePriority. Was `reserved`, which no client before it ever wrote (and the daemon zeroes each
  // new segment), so an older client's requests read as normal: no layout version bump.
  std::uint32_t priority;
  std::int64_t deadline_mono_ns;           // CLOCK_MONOTONIC; 0 means none
  // The client's own name for the request, the same when it re-submits it to a re-attached
  // daemon, so the dead-letter log records a failing request once (0: an older client, which
  // never wrote this padding). Untrusted: it only ever merges a client's own records.
  std::uint64_t request_id;
  // The model the request is for, by the id the daemon gives it (0: the default model, which is
  // what an older client, which never wrote this padding, asks for). Untrusted: an id the daemon
  // does not serve fails that request alone.
  std::uint32_t model;
  // The caller's trust domain within its client, for the response cache (shm/cache_layout.hpp):
  // an answer stored for one scope is never another's. 0: the client's own (what an older client,
  // which never wrote this padding, asks for). Untrusted: a client may name any scope of its own
  // user's segment, all of which it can read anyway.
  std::uint32_t cache_scope;
  // The request's trace context (shm/trace_context.hpp) when the daemon is to trace it, as words
  // of its bytes: the trace id, then the parent span's id. All zero: not traced (what an older
  // client, which never wrote this padding, asks for). Untrusted: it names only the spans the
  // daemon exports for this request, and an invalid one (an id of zeroes) is none.
  std::uint64_t trace_id[2];
  std::uint64_t trace_parent;
};

// Per-request result the daemon writes; the output bytes (or an error message) follow.
struct alignas(kCacheLine) CompletionSlotHeader {
  std::atomic<std::uint32_t> state;  // make_state(generation, phase); the futex word
  std::uint32_t status;              // WireStatus
  std::uint32_t output_bytes;
  std::uint32_t reserved;
};

using RingEntry = std::uint64_t;  // (generation << 32) | slot index
constexpr RingEntry make_ring_entry(std::uint32_t slot, std::uint32_t generation) noexcept {
  return (static_cast<std::uint64_t>(generation) << 32) | slot;
}
constexpr std::uint32_t ring_entry_slot(RingEntry e) noexcept { return static_cast<std::uint32_t>(e); }
constexpr std::uint32_t ring_entry_generation(RingEntry e) noexcept {
  return static_cast<std::uint32_t>(e >> 32);
}

static_assert(std::is_standard_layout_v<SegmentHeader> && std::is_trivially_copyable_v<SegmentHeader>);
static_assert(sizeof(SegmentHeader) == 128, "header size is part of the layout version");
static_assert(std::is_standard_layout_v<EventWaiter> && sizeof(EventWaiter) == kCacheLine);
static_assert(std::is_standard_layout_v<CacheHitCounts> && sizeof(CacheHitCounts) == 16 * kCacheHitModels);
static_assert(std::is_standard_layout_v<CompletionEvents> && sizeof(CompletionEvents) == kCacheLine);
static_assert(std::is_standard_layout_v<RingTail> && sizeof(RingTail) == kCacheLine);
static_assert(std::is_standard_layout_v<FinishedTail> && sizeof(FinishedTail) == kCacheLine);
static_assert(std::is_standard_layout_v<CompletionHeader> && sizeof(CompletionHeader) == kCacheLine);
static_assert(std::is_standard_layout_v<RequestSlotHeader> && sizeof(RequestSlotHeader) == kCacheLine);
static_assert(offsetof(RequestSlotHeader, priority) == 12, "where older clients left reserved zeroes");
static_assert(offsetof(RequestSlotHeader, deadline_mono_ns) == 16);
static_assert(offsetof(RequestSlotHeader, request_id) == 24, "in what was padding: no layout version bump");
static_assert(offsetof(RequestSlotHeader, model) == 32, "in what was padding: no layout version bump");
static_assert(offsetof(RequestSlotHeader, cache_scope) == 36, "in what was padding");
static_assert(offsetof(RequestSlotHeader, trace_id) == 40 && offsetof(RequestSlotHeader, trace_parent) == 56,
              "in what was padding");
static_assert(std::is_standard_layout_v<CompletionSlotHeader> && sizeof(CompletionSlotHeader) == kCacheLine);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "atomics in shared memory must not hide a lock");
static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && sizeof(std::atomic<std::uint64_t>) == 8,
              "atomics must be their plain width so both sides agree on offsets");

// The sizes a daemon chooses for one client; everything else is derived from these.
struct SegmentParams {
  // Power of two; also the ring capacity. What a client can have in flight is its rate times the
  // latency: a burst at 60,000 requests/s answered within 20 ms (a VM's hiccup on top of a p99 of
  // 10) holds 1,200. Pages are touched only by the slots in use (freed slots are reused first), so
  // a larger count costs address space, not memory.
  std::uint32_t slot_count = 4096;
  std::uint32_t max_input_bytes = 64 * 1024;
  std::uint32_t max_output_bytes = 64 * 1024;
};

// The derived byte layout of both regions.
struct Geometry {
  SegmentParams params;
  std::uint64_t event_waiter_offset = 0;     // EventWaiter, after the header
  std::uint64_t cache_hits_offset = 0;       // CacheHitCounts
  std::uint64_t ring_offset = 0;             // RingTail, then slot_count RingEntry
  std::uint64_t request_slots_offset = 0;
  std::uint64_t request_slot_stride = 0;
  std::uint64_t request_region_bytes = 0;
  std::uint64_t completion_events_offset = 0;  // CompletionEvents, after CompletionHeader
  std::uint64_t finished_offset = 0;           // FinishedTail, then kFinishedPerSlot x slot_count RingEntry
  std::uint64_t completion_slots_offset = 0;
  std::uint64_t completion_slot_stride = 0;
  std::uint64_t completion_region_bytes = 0;
};

// Whether the params are usable; EINVAL and why not when they are not.
Expected<void> check_params(const SegmentParams& params);
// Precondition: check_params(params) succeeded.
Geometry compute_geometry(const SegmentParams& params) noexcept;
SegmentHeader make_header(const Geometry& geometry) noexcept;
// Checks a header read from a mapped request region of the given sizes against the layout this
// build understands; returns the geometry, or EPROTO and why the header is refused.
Expected<Geometry> validate_header(const SegmentHeader& header, std::uint64_t request_region_bytes,
                                   std::uint64_t completion_region_bytes);

}  // namespace batchd::shm

// Typed access to a mapped segment at the offsets of a Geometry. The view trusts its geometry,
// never the header: the daemon builds it from its own parameters, the client from a header it
// has validated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shm/layout.hpp"

namespace batchd::shm {

class SegmentView {
 public:
  SegmentView() = default;
  // Preconditions: request and completion point at mappings of at least geometry's region sizes.
  SegmentView(const Geometry& geometry, void* request, void* completion) noexcept
      : g_(geometry), request_(static_cast<std::byte*>(request)),
        completion_(static_cast<std::byte*>(completion)) {}

  [[nodiscard]] const Geometry& geometry() const noexcept { return g_; }
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return g_.params.slot_count; }

  [[nodiscard]] SegmentHeader* header() const noexcept {
    return reinterpret_cast<SegmentHeader*>(request_);
  }
  [[nodiscard]] EventWaiter* event_waiter() const noexcept {
    return reinterpret_cast<EventWaiter*>(request_ + g_.event_waiter_offset);
  }
  [[nodiscard]] CacheHitCounts* cache_hits() const noexcept {
    return reinterpret_cast<CacheHitCounts*>(request_ + g_.cache_hits_offset);
  }
  [[nodiscard]] CompletionEvents* completion_events() const noexcept {
    return reinterpret_cast<CompletionEvents*>(completion_ + g_.completion_events_offset);
  }
  [[nodiscard]] RingTail* ring_tail() const noexcept {
    return reinterpret_cast<RingTail*>(request_ + g_.ring_offset);
  }
  [[nodiscard]] RingEntry* ring_entries() const noexcept {
    return reinterpret_cast<RingEntry*>(request_ + g_.ring_offset + sizeof(RingTail));
  }
  [[nodiscard]] FinishedTail* finished_tail() const noexcept {
    return reinterpret_cast<FinishedTail*>(completion_ + g_.finished_offset);
  }
  [[nodiscard]] RingEntry* finished_entries() const noexcept {
    return reinterpret_cast<RingEntry*>(completion_ + g_.finished_offset + sizeof(FinishedTail));
  }
  [[nodiscard]] std::uint64_t finished_capacity() const noexcept {
    return std::uint64_t{kFinishedPerSlot} * g_.params.slot_count;
  }
  [[nodiscard]] CompletionHeader* completion_header() const noexcept {
    return reinterpret_cast<CompletionHeader*>(completion_);
  }

  // Precondition (checked by the caller, who read the index once): slot < slot_count().
  [[nodiscard]] RequestSlotHeader* request_slot(std::uint32_t slot) const noexcept {
    return reinterpret_cast<RequestSlotHeader*>(request_ + g_.request_slots_offset +
                                                g_.request_slot_stride * slot);
  }
  [[nodiscard]] std::byte* request_input(std::uint32_t slot) const noexcept {
    return reinterpret_cast<std::byte*>(request_slot(slot)) + sizeof(RequestSlotHeader);
  }
  [[nodiscard]] CompletionSlotHeader* completion_slot(std::uint32_t slot) const noexcept {
    return reinterpret_cast<CompletionSlotHeader*>(completion_ + g_.completion_slots_offset +
                                                   g_.completion_slot_stride * slot);
  }
  [[nodiscard]] std::byte* completion_output(std::uint32_t slot) const noexcept {
    return reinterpret_cast<std::byte*>(completion_slot(slot)) + sizeof(CompletionSlotHeader);
  }

 private:
  Geometry g_{};
  std::byte* request_ = nullptr;
  std::byte* completion_ = nullptr;
};

}  // namespace batchd::shm

// The daemon's finished list as the client reads it: the entries name answered slots (hints the
// client confirms against the slot's state before it reads an answer), and a client that fell more than the list's capacity
// behind is told to look at every slot, so no answer is ever missed.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "client_lib/client_segment.hpp"
#include "shm/layout.hpp"
#include "shm/segment_view.hpp"

using namespace batchd;

namespace {

// A segment's two regions in process memory, with the client's bookkeeping over them.
struct LocalSegment {
  explicit LocalSegment(std::uint32_t slots)
      : geometry(shm::compute_geometry(shm::SegmentParams{slots, 64, 256})),
        request(geometry.request_region_bytes / sizeof(std::uint64_t)),
        completion(geometry.completion_region_bytes / sizeof(std::uint64_t)) {
    seg.view = shm::SegmentView(geometry, request.data(), completion.data());
    seg.slots.resize(slots);
  }
  // What the daemon does: entries first, then the tail.
  void daemon_finishes(std::uint32_t slot, std::uint32_t generation) {
    const std::uint64_t mask = seg.view.finished_capacity() - 1;
    seg.view.finished_entries()[tail & mask] = shm::make_ring_entry(slot, generation);
    seg.view.finished_tail()->tail.store(++tail);
  }
  shm::Geometry geometry;
  std::vector<std::uint64_t> request, completion;
  client_detail::Segment seg;
  std::uint64_t tail = 0;
};

}  // namespace

TEST_CASE("the finished list sits between the completion events and the slots, sized per slot") {
  const shm::Geometry g = shm::compute_geometry(shm::SegmentParams{1024, 64, 256});
  CHECK(g.finished_offset >= g.completion_events_offset + sizeof(shm::CompletionEvents));
  CHECK(g.completion_slots_offset >= g.finished_offset + sizeof(shm::FinishedTail) +
                                         sizeof(shm::RingEntry) * shm::kFinishedPerSlot * 1024);
  CHECK(g.completion_slots_offset % shm::kCacheLine == 0);
}

TEST_CASE("the client reads each new entry of the finished list once") {
  LocalSegment local(8);
  local.daemon_finishes(3, 7);
  local.daemon_finishes(5, 2);
  std::vector<shm::RingEntry> got;
  REQUIRE(local.seg.collect_finished(got));
  CHECK(got == std::vector<shm::RingEntry>{shm::make_ring_entry(3, 7), shm::make_ring_entry(5, 2)});
  got.clear();
  REQUIRE(local.seg.collect_finished(got));  // nothing new: nothing read, no loss
  CHECK(got.empty());
  local.daemon_finishes(1, 4);
  REQUIRE(local.seg.collect_finished(got));
  CHECK(got == std::vector<shm::RingEntry>{shm::make_ring_entry(1, 4)});
}

TEST_CASE("a client more than the list's capacity behind is told to look at every request") {
  LocalSegment local(4);  // capacity 8 entries
  const std::uint64_t capacity = local.seg.view.finished_capacity();
  REQUIRE(capacity == 8);
  for (std::uint64_t i = 0; i < capacity + 1; ++i) local.daemon_finishes(static_cast<std::uint32_t>(i % 4), 1);
  std::vector<shm::RingEntry> got;
  CHECK_FALSE(local.seg.collect_finished(got));
  CHECK(local.seg.finished_head == capacity + 1);  // caught up: the next entries are read normally
  got.clear();
  local.daemon_finishes(2, 9);
  REQUIRE(local.seg.collect_finished(got));
  CHECK(got == std::vector<shm::RingEntry>{shm::make_ring_entry(2, 9)});
}

TEST_CASE("entries naming slots out of range are dropped") {
  LocalSegment local(4);
  local.daemon_finishes(4, 1);
  local.daemon_finishes(0xFFFFFFFFU, 1);
  local.daemon_finishes(3, 1);
  std::vector<shm::RingEntry> got;
  REQUIRE(local.seg.collect_finished(got));
  CHECK(got == std::vector<shm::RingEntry>{shm::make_ring_entry(3, 1)});
}

// The segment header: what a client accepts and what it refuses.
#include <doctest/doctest.h>

#include "shm/layout.hpp"

using namespace batchd::shm;

namespace {

struct Fixture {
  SegmentParams params{256, 4096, 4096};
  Geometry geometry = compute_geometry(params);
  SegmentHeader header = make_header(geometry);
  Geometry out;
  std::string why;

  bool validate() {
    return validate_header(header, geometry.request_region_bytes, geometry.completion_region_bytes,
                           out, why);
  }
};

}  // namespace

TEST_CASE("a header made for a geometry validates back to it") {
  Fixture f;
  REQUIRE(f.validate());
  CHECK(f.out.request_slots_offset == f.geometry.request_slots_offset);
  CHECK(f.out.completion_slot_stride == f.geometry.completion_slot_stride);
  CHECK(f.geometry.request_slots_offset % kCacheLine == 0);
  CHECK(f.geometry.request_slot_stride % kCacheLine == 0);
  CHECK(f.geometry.request_slot_stride >= sizeof(RequestSlotHeader) + 4096);
  CHECK(f.geometry.completion_region_bytes % 4096 == 0);
}

TEST_CASE("a wrong magic is refused") {
  Fixture f;
  f.header.magic ^= 1;
  CHECK_FALSE(f.validate());
  CHECK(f.why.find("magic") != std::string::npos);
}

TEST_CASE("a wrong layout version or header size is refused") {
  Fixture f;
  f.header.layout_version = kLayoutVersion + 1;
  CHECK_FALSE(f.validate());
  CHECK(f.why.find("version") != std::string::npos);
  Fixture g;
  g.header.header_bytes = 64;
  CHECK_FALSE(g.validate());
}

TEST_CASE("impossible sizes are refused") {
  for (std::uint32_t slots : {0U, 3U, 1000U, kMaxSlots * 2}) {
    Fixture f;
    f.header.slot_count = slots;
    CHECK_FALSE(f.validate());
  }
  Fixture big;
  big.header.max_input_bytes = kMaxPayloadBytes + 1;
  CHECK_FALSE(big.validate());
  Fixture tiny_output;
  tiny_output.header.max_output_bytes = 8;
  CHECK_FALSE(tiny_output.validate());
}

TEST_CASE("offsets that disagree with the sizes are refused") {
  Fixture f;
  f.header.request_slot_stride += kCacheLine;
  CHECK_FALSE(f.validate());
  CHECK(f.why.find("offsets") != std::string::npos);
}

TEST_CASE("regions smaller than the header claims are refused") {
  Fixture f;
  CHECK_FALSE(validate_header(f.header, f.geometry.request_region_bytes - 4096,
                              f.geometry.completion_region_bytes, f.out, f.why));
  CHECK_FALSE(validate_header(f.header, f.geometry.request_region_bytes,
                              f.geometry.completion_region_bytes + 4096, f.out, f.why));
}

TEST_CASE("state words and ring entries round-trip") {
  const std::uint32_t s = make_state(kGenerationMask, SlotPhase::kDone);
  CHECK(state_generation(s) == kGenerationMask);
  CHECK(state_phase(s) == SlotPhase::kDone);
  const RingEntry e = make_ring_entry(kMaxSlots - 1, 12345);
  CHECK(ring_entry_slot(e) == kMaxSlots - 1);
  CHECK(ring_entry_generation(e) == 12345);
}

// The segment header: what a client accepts and what it refuses.
#include <doctest/doctest.h>

#include "shm/layout.hpp"
#include "tests/doctest_expected.hpp"

using namespace batchd::shm;

namespace {

struct Fixture {
  SegmentParams params{256, 4096, 4096};
  Geometry geometry = compute_geometry(params);
  SegmentHeader header = make_header(geometry);

  [[nodiscard]] batchd::Expected<Geometry> validate() const {
    return validate_header(header, geometry.request_region_bytes, geometry.completion_region_bytes);
  }
  // Why the header is refused; fails the test if it is accepted.
  [[nodiscard]] std::string refusal() const {
    const auto validated = validate();
    REQUIRE_FALSE(validated);
    CHECK(validated.error().code == std::errc::protocol_error);
    return validated.error().message;
  }
};

}  // namespace

TEST_CASE("a header made for a geometry validates back to it") {
  Fixture f;
  const auto out = f.validate();
  REQUIRE(out);
  CHECK(out->request_slots_offset == f.geometry.request_slots_offset);
  CHECK(out->completion_slot_stride == f.geometry.completion_slot_stride);
  CHECK(f.geometry.request_slots_offset % kCacheLine == 0);
  CHECK(f.geometry.request_slot_stride % kCacheLine == 0);
  CHECK(f.geometry.request_slot_stride >= sizeof(RequestSlotHeader) + 4096);
  CHECK(f.geometry.completion_region_bytes % 4096 == 0);
}

TEST_CASE("a wrong magic is refused") {
  Fixture f;
  f.header.magic ^= 1;
  CHECK(f.refusal().find("magic") != std::string::npos);
}

TEST_CASE("a wrong layout version or header size is refused") {
  Fixture f;
  f.header.layout_version = kLayoutVersion + 1;
  CHECK(f.refusal().find("version") != std::string::npos);
  Fixture g;
  g.header.header_bytes = 64;
  CHECK(g.refusal().find("header 64 bytes") != std::string::npos);
}

TEST_CASE("impossible sizes are refused") {
  for (std::uint32_t slots : {0U, 3U, 1000U, kMaxSlots * 2}) {
    Fixture f;
    f.header.slot_count = slots;
    CHECK(f.refusal().find("slot count") != std::string::npos);
  }
  Fixture big;
  big.header.max_input_bytes = kMaxPayloadBytes + 1;
  CHECK(big.refusal().find("max input bytes") != std::string::npos);
  Fixture tiny_output;
  tiny_output.header.max_output_bytes = 8;
  CHECK(tiny_output.refusal().find("max output bytes 8") != std::string::npos);
}

TEST_CASE("offsets that disagree with the sizes are refused") {
  Fixture f;
  f.header.request_slot_stride += kCacheLine;
  CHECK(f.refusal().find("offsets") != std::string::npos);
}

TEST_CASE("regions smaller than the header claims are refused") {
  Fixture f;
  const auto short_request = validate_header(f.header, f.geometry.request_region_bytes - 4096,
                                             f.geometry.completion_region_bytes);
  REQUIRE_FALSE(short_request);
  CHECK(short_request.error().message.find("but the header needs") != std::string::npos);
  CHECK_FALSE(validate_header(f.header, f.geometry.request_region_bytes,
                              f.geometry.completion_region_bytes + 4096));
}

TEST_CASE("unusable params are refused with EINVAL, saying which") {
  CHECK(check_params(SegmentParams{}));
  const auto bad = check_params(SegmentParams{3, 4096, 4096});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == std::errc::invalid_argument);
  CHECK(bad.error().message.find("slot count 3 must be a power of two") != std::string::npos);
}

TEST_CASE("state words and ring entries round-trip") {
  const std::uint32_t s = make_state(kGenerationMask, SlotPhase::kDone);
  CHECK(state_generation(s) == kGenerationMask);
  CHECK(state_phase(s) == SlotPhase::kDone);
  const RingEntry e = make_ring_entry(kMaxSlots - 1, 12345);
  CHECK(ring_entry_slot(e) == kMaxSlots - 1);
  CHECK(ring_entry_generation(e) == 12345);
}

TEST_CASE("a request slot's priority sits where older clients left reserved zeroes, and zero is normal") {
  CHECK(offsetof(RequestSlotHeader, priority) == 12);
  CHECK(sizeof(RequestSlotHeader::priority) == 4);
  CHECK(static_cast<std::uint32_t>(WirePriority::kNormal) == 0);
  CHECK(static_cast<std::uint32_t>(WirePriority::kHigh) == 1);
  CHECK(static_cast<std::uint32_t>(WirePriority::kLow) == 2);
  CHECK(kWirePriorities == 3);
}

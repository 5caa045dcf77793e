// A batch's inputs in its input-arena slot (daemon/input_arena.hpp, arena_vector.hpp): they stay
// in the slot while they fit, move to the heap past it and come back on clear; splitting, taking
// out the expired and copying keep every input and its order whichever memory each side is in.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "daemon/batch.hpp"

using namespace batchd;

namespace {

void fill(Batch& batch, const std::vector<std::string>& inputs, const std::vector<std::int64_t>& deadlines = {}) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    RequestRef ref;
    ref.slot = static_cast<std::uint32_t>(i);
    ref.deadline_mono_ns = deadlines.empty() ? 0 : deadlines[i];
    batch.append(inputs[i], ref);
  }
}

std::vector<std::string> inputs_of(const Batch& batch) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < batch.size(); ++i) out.emplace_back(batch.input().at(i));
  return out;
}

std::vector<std::uint32_t> slots_of(const Batch& batch) {
  std::vector<std::uint32_t> out;
  for (const RequestRef& r : batch.requests) out.push_back(r.slot);
  return out;
}

}  // namespace

TEST_CASE("an arena vector stays in its piece while it fits, moves to the heap past it, and comes back on clear") {
  char piece[16];
  ArenaVector<char> v;
  v.place_in(piece, sizeof(piece));
  v.append("0123456789", 10);
  CHECK(v.in_place());
  CHECK(v.data() == piece);
  v.append("abcdefghij", 10);
  CHECK_FALSE(v.in_place());
  CHECK(std::string(v.data(), v.size()) == "0123456789abcdefghij");
  v.truncate(4);
  CHECK(std::string(v.data(), v.size()) == "0123");
  v.clear();
  CHECK(v.in_place());
  CHECK(v.empty());
  v.assign("xyz", 3);
  CHECK(v.data() == piece);
  CHECK(std::string(v.data(), v.size()) == "xyz");
  // Its own values appended to it, as it spills and once on the heap (the old array outlives the copy).
  v.append("0123456789", 10);
  v.append(v.data(), v.size());
  CHECK_FALSE(v.in_place());
  v.append(v.data(), v.size());
  CHECK(std::string(v.data(), v.size()) == "xyz0123456789xyz0123456789xyz0123456789xyz0123456789");
}

TEST_CASE("a batch of empty inputs on no storage at all takes out the expired without touching memory") {
  Batch a, b;  // never placed, never given a byte: its input bytes have no storage
  fill(a, {"", "", ""}, {10, 0, 10});
  CHECK(a.move_expired_into(b, 20) == 2);
  CHECK(slots_of(a) == std::vector<std::uint32_t>{1});
  CHECK(inputs_of(b) == std::vector<std::string>{"", ""});
  CHECK(a.input().offsets[1] == 0);
}

TEST_CASE("a batch in an arena slot keeps its inputs there, and outgrows it onto the heap without losing any") {
  auto arena = InputArena::create(2, 4, 64);
  REQUIRE(arena.has_value());
  Batch batch;
  batch.place_in(arena->slot(0));
  fill(batch, {"alpha", "beta", "gamma"});
  CHECK(arena->holds(batch.input().bytes.data(), batch.input().bytes.size()));
  CHECK(arena->holds(batch.input().offsets.data(), batch.input().offsets.size_bytes()));
  // Past the slot's 4 inputs: the offsets leave for the heap, the bytes stay.
  fill(batch, {"delta", "epsilon"});
  CHECK_FALSE(arena->holds(batch.input().offsets.data(), 1));
  CHECK(inputs_of(batch) == std::vector<std::string>{"alpha", "beta", "gamma", "delta", "epsilon"});
  // Past its bytes too (the slot's page).
  const std::string big(5000, 'b');
  fill(batch, {big});
  CHECK_FALSE(arena->holds(batch.input().bytes.data(), 1));
  CHECK(inputs_of(batch).back() == big);
  batch.clear();
  CHECK(batch.size() == 0);
  fill(batch, {"again"});
  CHECK(arena->holds(batch.input().bytes.data(), 5));
  CHECK(arena->holds(batch.input().offsets.data(), 8));
  CHECK(inputs_of(batch) == std::vector<std::string>{"again"});
}

TEST_CASE("splitting, taking out the expired and copying keep inputs and order, arena or heap") {
  auto arena = InputArena::create(2, 8, 4096);
  REQUIRE(arena.has_value());
  for (const bool first_in_arena : {true, false}) {
    CAPTURE(first_in_arena);
    Batch a, b, c;
    if (first_in_arena) a.place_in(arena->slot(0));
    b.place_in(arena->slot(1));  // the other side in the arena, or both in it
    fill(a, {"one", "two", "", "four", "five"}, {0, 100, 50, 0, 10});

    // Deadlines at or before 50 expire: "", "five"; the kept close up in place.
    CHECK(a.move_expired_into(b, 50) == 2);
    CHECK(inputs_of(a) == std::vector<std::string>{"one", "two", "four"});
    CHECK(slots_of(a) == std::vector<std::uint32_t>{0, 1, 3});
    CHECK(inputs_of(b) == std::vector<std::string>{"", "five"});
    CHECK(slots_of(b) == std::vector<std::uint32_t>{2, 4});
    CHECK(a.input().offsets[0] == 0);
    CHECK(a.input().bytes.size() == 10);

    a.split_into(c);
    CHECK(inputs_of(a) == std::vector<std::string>{"one"});
    CHECK(inputs_of(c) == std::vector<std::string>{"two", "four"});
    CHECK(slots_of(c) == std::vector<std::uint32_t>{1, 3});

    Batch d;
    c.copy_into(d);
    CHECK(inputs_of(d) == inputs_of(c));
    CHECK(slots_of(d) == slots_of(c));
  }
}

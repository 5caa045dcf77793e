// The daemon's reader of a client segment: every index, length and position it takes from shared
// memory is checked before use.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/client_session.hpp"
#include "daemon/control_socket.hpp"
#include "shm/ring.hpp"
#include "tests/doctest_expected.hpp"

using namespace batchd;

namespace {

struct Fixture {
  shm::SegmentParams params{16, 128, 256};
  std::unique_ptr<ClientSession> session;
  shm::RingProducer producer;
  shm::UniqueFd peer;

  // `granted`: the highest class the session's user may run at.
  explicit Fixture(shm::WirePriority granted = shm::WirePriority::kHigh) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0);
    peer.reset(fds[1]);
    auto created = ClientSession::create(1, params, 0, 0, granted);
    REQUIRE(created);
    session = std::move(*created);
    session->set_connection(shm::UniqueFd(fds[0]));
    const auto& v = session->view();
    producer = shm::RingProducer(v.ring_tail(), v.ring_entries(), v.completion_header(), v.slot_count());
  }

  void submit(std::uint32_t slot, std::uint32_t generation, std::uint32_t bytes,
              std::uint32_t priority = 0) {
    if (slot < params.slot_count) {
      session->view().request_slot(slot)->input_bytes = bytes;
      session->view().request_slot(slot)->priority = priority;
    }
    REQUIRE(producer.try_push(shm::make_ring_entry(slot, generation)));
  }

  TakeResult take(TakenRequest& out, std::string& why) { return session->take(out, why); }
};

}  // namespace

TEST_CASE("a well-formed request is taken with its own slot's fields") {
  Fixture f;
  f.session->view().request_slot(3)->deadline_mono_ns = 777;
  f.submit(3, 5, 100);
  TakenRequest t;
  std::string why;
  REQUIRE(f.take(t, why) == TakeResult::kTaken);
  CHECK(t.slot == 3);
  CHECK(t.generation == 5);
  CHECK(t.input_bytes == 100);
  CHECK(t.deadline_mono_ns == 777);
  CHECK(t.input == f.session->view().request_input(3));
  f.session->pop();
  CHECK(f.take(t, why) == TakeResult::kEmpty);
}

TEST_CASE("a claim of high priority without the grant runs at normal and says it was downgraded") {
  Fixture f(shm::WirePriority::kNormal);
  f.submit(0, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kHigh));
  f.submit(1, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kLow));
  f.submit(2, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kNormal));
  TakenRequest t;
  std::string why;
  const std::pair<shm::WirePriority, bool> expected[] = {
      {shm::WirePriority::kNormal, true}, {shm::WirePriority::kLow, false}, {shm::WirePriority::kNormal, false}};
  for (const auto& [priority, downgraded] : expected) {
    REQUIRE(f.take(t, why) == TakeResult::kTaken);
    CHECK(t.priority == priority);
    CHECK(t.downgraded == downgraded);
    f.session->pop();
  }
}

TEST_CASE("each priority class is taken as the slot names it; a slot never written is normal") {
  Fixture f;
  f.submit(0, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kHigh));
  f.submit(1, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kLow));
  f.submit(2, 1, 1, static_cast<std::uint32_t>(shm::WirePriority::kNormal));
  TakenRequest t;
  std::string why;
  for (const shm::WirePriority expected :
       {shm::WirePriority::kHigh, shm::WirePriority::kLow, shm::WirePriority::kNormal}) {
    REQUIRE(f.take(t, why) == TakeResult::kTaken);
    CHECK(t.priority == expected);
    f.session->pop();
  }
  // A fresh segment is zeroed, so a client that never writes the field asks for normal.
  Fixture g;
  REQUIRE(g.producer.try_push(shm::make_ring_entry(5, 1)));
  REQUIRE(g.take(t, why) == TakeResult::kTaken);
  CHECK(t.priority == shm::WirePriority::kNormal);
}

TEST_CASE("a priority outside the three classes is a violation naming the slot and the value") {
  for (const std::uint32_t bad : {3U, 7U, 0xFFFFFFFFU}) {
    CAPTURE(bad);
    Fixture f;
    f.submit(6, 1, 10, bad);
    TakenRequest t;
    std::string why;
    CHECK(f.take(t, why) == TakeResult::kViolation);
    CHECK(why.find("slot 6") != std::string::npos);
    CHECK(why.find("priority " + std::to_string(bad)) != std::string::npos);
  }
}

TEST_CASE("an out-of-range slot index is a violation") {
  Fixture f;
  f.submit(16, 1, 0);
  TakenRequest t;
  std::string why;
  CHECK(f.take(t, why) == TakeResult::kViolation);
  CHECK(why.find("slot 16") != std::string::npos);
}

TEST_CASE("an impossible generation is a violation") {
  Fixture f;
  f.submit(0, 0, 0);
  TakenRequest t;
  std::string why;
  CHECK(f.take(t, why) == TakeResult::kViolation);
  Fixture g;
  g.submit(0, shm::kGenerationMask + 1, 0);
  CHECK(g.take(t, why) == TakeResult::kViolation);
}

TEST_CASE("an input length beyond the limit is a violation") {
  Fixture f;
  f.submit(2, 1, 129);
  TakenRequest t;
  std::string why;
  CHECK(f.take(t, why) == TakeResult::kViolation);
  CHECK(why.find("129") != std::string::npos);
  Fixture g;
  g.submit(2, 1, 0xFFFFFFFFU);
  CHECK(g.take(t, why) == TakeResult::kViolation);
}

TEST_CASE("resubmitting a slot that is still in flight is a violation") {
  Fixture f;
  f.submit(4, 1, 10);
  TakenRequest t;
  std::string why;
  REQUIRE(f.take(t, why) == TakeResult::kTaken);
  f.session->mark_in_flight(t.slot, t.generation);
  f.session->pop();
  f.submit(4, 2, 10);
  CHECK(f.take(t, why) == TakeResult::kViolation);
  CHECK(why.find("in flight") != std::string::npos);
}

TEST_CASE("a ring tail more than a ring ahead is a violation") {
  Fixture f;
  f.session->view().ring_tail()->tail.store(17);
  TakenRequest t;
  std::string why;
  CHECK(f.take(t, why) == TakeResult::kViolation);
  CHECK(f.session->has_pending());  // reported as pending so the caller takes and drops it
}

TEST_CASE("a closed session yields nothing") {
  Fixture f;
  f.submit(1, 1, 1);
  f.session->mark_closed();
  TakenRequest t;
  std::string why;
  CHECK(f.take(t, why) == TakeResult::kEmpty);
  CHECK_FALSE(f.session->has_pending());
}

TEST_CASE("peers are allowed by the daemon's uid or the allow lists only") {
  const uid_t me = ::geteuid();
  CHECK(peer_allowed(PeerCredentials{1, me, 12345}, {}, {}));
  CHECK_FALSE(peer_allowed(PeerCredentials{1, me + 1, 12345}, {}, {}));
  CHECK(peer_allowed(PeerCredentials{1, me + 1, 12345}, {me + 1}, {}));
  CHECK(peer_allowed(PeerCredentials{1, me + 1, 12345}, {}, {12345}));
  CHECK_FALSE(peer_allowed(PeerCredentials{1, me + 1, 12345}, {me + 2}, {54321}));
}

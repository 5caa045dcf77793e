// The drain loop's tables of peers: the handshakes in progress (PendingAttaches) and the attached
// clients (SessionTable). Their per-uid counts bound what one user holds, their order decides
// who expires first and who gives way, and the drain order must stay fair as clients come and go.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "daemon/pending_attaches.hpp"
#include "daemon/session_table.hpp"

using namespace batchd;

namespace {

PendingAttach pending_of(uid_t uid, std::int64_t deadline_ns) {
  PendingAttach p;
  p.peer.uid = uid;
  p.deadline_ns = deadline_ns;
  return p;
}

std::shared_ptr<ClientSession> session_of(std::uint64_t id, uid_t uid) {
  auto created = ClientSession::create(id, shm::SegmentParams{16, 64, 256}, 1, uid, shm::WirePriority::kNormal);
  REQUIRE_MESSAGE(created.has_value(), (created ? std::string() : created.error().message));
  return std::shared_ptr<ClientSession>(std::move(*created));
}

}  // namespace

TEST_CASE("handshakes: counted per uid, expire in accept order, the heaviest user gives way") {
  PendingAttaches table;
  CHECK(table.empty());
  CHECK(table.oldest() == 0);
  CHECK(table.next_deadline_ns() == 0);
  table.add(1, pending_of(100, 10));
  table.add(2, pending_of(200, 20));
  table.add(3, pending_of(200, 30));
  table.add(4, pending_of(300, 40));
  CHECK(table.size() == 4);
  CHECK(table.of_uid(200) == 2);
  CHECK(table.of_uid(999) == 0);
  CHECK(table.oldest() == 1);
  CHECK(table.next_deadline_ns() == 10);
  CHECK(table.oldest_of(200) == 2);
  CHECK(table.oldest_of(999) == 0);
  // The user holding the most makes way, whoever the newcomer is.
  CHECK(table.heaviest(100) == 200);
  CHECK(table.heaviest(400) == 200);

  REQUIRE(table.find(2) != nullptr);
  table.find(2)->polled = true;
  const PendingAttach taken = table.take(2);
  CHECK(taken.peer.uid == 200);
  CHECK(taken.polled);
  CHECK(table.find(2) == nullptr);
  CHECK(table.of_uid(200) == 1);
  CHECK(table.oldest_of(200) == 3);
  table.take(1);
  CHECK(table.of_uid(100) == 0);
  CHECK(table.oldest() == 3);
  CHECK(table.next_deadline_ns() == 30);

  table.defer_hello(4);
  table.defer_hello(3);
  CHECK(table.hellos_due());
  CHECK(table.next_due_hello() == 4);
  CHECK(table.next_due_hello() == 3);
  CHECK_FALSE(table.hellos_due());

  int released = 0;
  table.release_all([&](shm::UniqueFd) { ++released; });
  CHECK(released == 2);
  CHECK(table.empty());
  CHECK(table.of_uid(200) == 0);
}

TEST_CASE("sessions: counted per uid, each drained in turn, and a dropped one leaves the turn") {
  SessionTable table;
  CHECK(table.empty());
  for (std::uint64_t id = 1; id <= 3; ++id) table.add(session_of(id, id == 3 ? 600 : 500));
  CHECK(table.size() == 3);
  CHECK(table.of_uid(500) == 2);
  CHECK(table.of_uid(600) == 1);
  REQUIRE(table.find(2) != nullptr);
  CHECK(table.find(2)->id() == 2);
  CHECK(table.find(9) == nullptr);

  std::vector<std::uint64_t> turns;
  for (int i = 0; i < 6; ++i) turns.push_back(table.next_in_turn()->id());
  CHECK(turns == std::vector<std::uint64_t>{1, 2, 3, 1, 2, 3});

  const std::shared_ptr<ClientSession> dropped = table.take(2);
  REQUIRE(dropped != nullptr);
  CHECK(dropped->id() == 2);
  CHECK(table.take(2) == nullptr);
  CHECK(table.find(2) == nullptr);
  CHECK(table.of_uid(500) == 1);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 4; ++i) seen.insert(table.next_in_turn()->id());
  CHECK(seen == std::set<std::uint64_t>{1, 3});
  CHECK_FALSE(table.any_pending());  // nothing submitted on any ring

  table.take(1);
  table.take(3);
  CHECK(table.empty());
  CHECK(table.of_uid(500) == 0);
  CHECK(table.of_uid(600) == 0);
}

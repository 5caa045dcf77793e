// The pending queue: deficit round-robin by cost across tenants (users) and their clients, and
// the class floors that keep a lower class served beside a flood at a higher one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "daemon/pending_queue.hpp"

using namespace batchd;

namespace {

std::shared_ptr<ClientSession> session_with_id(std::uint64_t id, uid_t uid = 0) {
  shm::SegmentParams params{16, 65536, 256};
  auto created = ClientSession::create(id, params, 0, uid, shm::WirePriority::kNormal);
  REQUIRE(created.has_value());
  return std::move(*created);
}

PendingRequest request_of(const std::shared_ptr<ClientSession>& session, std::uint32_t bytes) {
  TakenRequest taken;
  taken.input_bytes = bytes;
  return PendingRequest{session, taken, 0};
}

}  // namespace

TEST_CASE("clients share the batches by what their requests cost, not by their count") {
  auto heavy = session_with_id(1);
  auto light = session_with_id(2);
  PendingQueue queue;
  for (int i = 0; i < 200; ++i) queue.push_back(request_of(heavy, 65536));
  for (int i = 0; i < 200; ++i) queue.push_back(request_of(light, 16));
  std::map<std::uint64_t, std::uint64_t> bytes_served, served;
  for (int i = 0; i < 150; ++i) {
    PendingRequest& next = queue.front(0, 0);
    bytes_served[next.session->id()] += ClassQueue::cost_of(next);
    served[next.session->id()] += 1;
    queue.pop_front();
  }
  MESSAGE("served: heavy ", served[1], " (", bytes_served[1], " B), light ", served[2], " (", bytes_served[2], " B)");
  // By count the heavy client would have had 75 of the 150; by cost it has had about as much
  // work as the light one, within a request and a turn.
  CHECK(served[1] < 10);
  CHECK(served[2] > 140);
  CHECK(bytes_served[1] <= bytes_served[2] + 65536 + ClassQueue::kQuantumBytes);
}

TEST_CASE("equal clients still alternate, several small requests to a turn") {
  auto a = session_with_id(1);
  auto b = session_with_id(2);
  PendingQueue queue;
  for (int i = 0; i < 300; ++i) {
    queue.push_back(request_of(a, 100));
    queue.push_back(request_of(b, 100));
  }
  std::uint64_t run = 0, longest_run = 0, last = 0, from_a = 0;
  for (int i = 0; i < 400; ++i) {
    PendingRequest& next = queue.front(0, 0);
    const std::uint64_t id = next.session->id();
    run = id == last ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
    last = id;
    from_a += id == 1 ? 1 : 0;
    queue.pop_front();
  }
  const std::uint64_t per_turn = ClassQueue::kQuantumBytes / (100 + ClassQueue::kRequestOverheadBytes) + 1;
  CHECK(longest_run <= per_turn);
  CHECK(from_a >= 200 - per_turn);
  CHECK(from_a <= 200 + per_turn);
  CHECK(queue.size() == 200);
}

namespace {

PendingRequest request_at(const std::shared_ptr<ClientSession>& session, std::uint32_t bytes,
                          shm::WirePriority priority) {
  PendingRequest request = request_of(session, bytes);
  request.taken.priority = priority;
  return request;
}

}  // namespace

TEST_CASE("no class takes everything: a waiting lower class keeps its floor share of the work") {
  auto flood = session_with_id(1);
  auto light = session_with_id(2);
  for (const bool floors : {true, false}) {
    CAPTURE(floors);
    PendingQueue queue;
    if (!floors) queue.set_floors({0, 0, 0});
    for (int i = 0; i < 300; ++i) queue.push_back(request_at(flood, 65536, shm::WirePriority::kHigh));
    for (int i = 0; i < 20; ++i) queue.push_back(request_at(light, 100, shm::WirePriority::kNormal));
    int normal_served = 0, popped = 0;
    while (normal_served < 20 && popped < 200) {
      normal_served += queue.front(0, 0).taken.priority == shm::WirePriority::kNormal ? 1 : 0;
      queue.pop_front();
      ++popped;
    }
    MESSAGE("normal's 20 small requests served within ", popped, " pops of a high flood");
    // With the floor, the credit of one large high request covers many small normal ones; without
    // it (strict priority) normal waits for the whole flood.
    if (floors) {
      CHECK(normal_served == 20);
      CHECK(popped <= 25);
    } else {
      CHECK(normal_served == 0);
    }
  }
}

TEST_CASE("two floods of equal requests: the lower class gets about its floor, the top class the rest") {
  auto high = session_with_id(1);
  auto low = session_with_id(2);
  PendingQueue queue;
  queue.set_floors({0, 0.1, 0.2});
  for (int i = 0; i < 400; ++i) {
    queue.push_back(request_at(high, 4096, shm::WirePriority::kHigh));
    queue.push_back(request_at(low, 4096, shm::WirePriority::kLow));
  }
  int low_served = 0;
  for (int i = 0; i < 300; ++i) {
    low_served += queue.front(0, 0).taken.priority == shm::WirePriority::kLow ? 1 : 0;
    queue.pop_front();
  }
  MESSAGE("low served ", low_served, " of 300 beside a high flood, at a floor of 20 %");
  // One low request per five high ones earns it a request's credit: a sixth of the requests.
  CHECK(low_served >= 40);
  CHECK(low_served <= 60);
}

TEST_CASE("tenants share by user, not by connection: ten connections of one user get one user's share") {
  std::vector<std::shared_ptr<ClientSession>> many;
  for (std::uint64_t id = 1; id <= 10; ++id) many.push_back(session_with_id(id, 1001));
  auto lone = session_with_id(99, 1002);
  PendingQueue queue;
  for (int i = 0; i < 100; ++i) {
    for (const auto& session : many) queue.push_back(request_of(session, 1000));
    for (int j = 0; j < 3; ++j) queue.push_back(request_of(lone, 1000));  // enough to stay waiting
  }
  std::map<uid_t, int> served;
  std::map<std::uint64_t, int> by_session;
  for (int i = 0; i < 400; ++i) {
    PendingRequest& next = queue.front(0, 0);
    ++served[next.session->uid()];
    ++by_session[next.session->id()];
    queue.pop_front();
  }
  MESSAGE("of 400 served: user 1001 (10 connections) ", served[1001], ", user 1002 (1 connection) ", served[1002]);
  // Within a quantum's worth of requests of an even split; by connection it would be 364 to 36.
  const int per_turn = static_cast<int>(ClassQueue::kQuantumBytes / (1000 + ClassQueue::kRequestOverheadBytes)) + 1;
  CHECK(std::abs(served[1001] - served[1002]) <= 2 * per_turn);
  // And within the user of many connections, each connection gets its turns (13 requests each).
  for (std::uint64_t id = 1; id <= 10; ++id) CHECK(by_session[id] > 0);
}

TEST_CASE("a gone client's waiting requests are dropped, its user's others stay, and the user goes when none is left") {
  auto a = session_with_id(1, 1001);
  auto b = session_with_id(2, 1001);
  auto other = session_with_id(3, 1002);
  PendingQueue queue;
  for (int i = 0; i < 5; ++i) {
    queue.push_back(request_of(a, 10));
    queue.push_back(request_of(b, 10));
    queue.push_back(request_of(other, 10));
  }
  CHECK(queue.forget(1) == 5);
  CHECK(queue.size() == 10);
  CHECK(queue.forget(2) == 5);
  CHECK(queue.forget(2) == 0);
  CHECK(queue.size() == 5);
  for (int i = 0; i < 5; ++i) {
    CHECK(queue.front(0, 0).session->id() == 3);
    queue.pop_front();
  }
  CHECK(queue.empty());
  queue.push_back(request_of(b, 10));  // cannot happen (a gone client sends nothing); still served
  CHECK(queue.front(0, 0).session->id() == 2);
}

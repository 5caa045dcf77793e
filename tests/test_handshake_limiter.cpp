// The handshake limits (daemon/handshake_limiter.hpp) and the cost-weighed round-robin of the
// pending queue (daemon/pending_queue.hpp), apart from the drain loop: time and costs are given.
#include <doctest/doctest.h>

#include <map>

#include "daemon/handshake_limiter.hpp"
#include "daemon/pending_queue.hpp"

using namespace batchd;

TEST_CASE("a user's handshakes come at its rate after a burst, and other users keep their own") {
  HandshakeLimiter limiter;
  std::int64_t now_ns = 1'000'000'000;
  unsigned admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += limiter.admit(1000, now_ns) ? 1 : 0;
  CHECK(admitted == static_cast<unsigned>(HandshakeLimiter::kPerUidBurst));
  CHECK(limiter.admit(1001, now_ns));  // another user is not charged for the first one's flood
  now_ns += 100'000'000;  // a tenth of a second refills a tenth of the rate
  admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += limiter.admit(1000, now_ns) ? 1 : 0;
  CHECK(admitted == static_cast<unsigned>(HandshakeLimiter::kPerUidPerSecond / 10));
}

TEST_CASE("a pass's handshake steps are bounded and come back with the next pass") {
  HandshakeLimiter limiter;
  unsigned steps = 0;
  while (limiter.take_step()) ++steps;
  CHECK(steps == HandshakeLimiter::kStepsPerPass);
  CHECK_FALSE(limiter.take_step());
  limiter.new_pass();
  CHECK(limiter.take_step());
}

TEST_CASE("the user holding the most handshakes gives way; a newcomer with none never does") {
  std::unordered_map<uid_t, unsigned> open{{1, 3}, {2, 7}, {3, 7}};
  const uid_t chosen = HandshakeLimiter::heaviest(open, 9);
  CHECK((chosen == 2 || chosen == 3));
  CHECK(HandshakeLimiter::heaviest(open, 3) == 3);  // among the most: its own oldest goes
  CHECK(HandshakeLimiter::heaviest({}, 5) == 5);
}

namespace {

std::shared_ptr<ClientSession> session_with_id(std::uint64_t id) {
  shm::SegmentParams params{16, 65536, 256};
  auto created = ClientSession::create(id, params, 0, 0, shm::WirePriority::kNormal);
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

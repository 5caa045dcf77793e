// The coalescer (daemon/coalescer.hpp): identical inputs follow their leader and are handed back
// when it settles; colliding hashes never join different inputs; a more urgent class leads too;
// tokens of settled entries are dead even once their entry is reused; and against a plain model
// of what is in flight, through a long random run of joins and settles over few hash values.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "daemon/coalescer.hpp"

using namespace batchd;

namespace {

RequestRef request(std::uint32_t slot, shm::WirePriority priority = shm::WirePriority::kNormal,
                   std::int64_t deadline_ns = 1000) {
  RequestRef r;
  r.slot = slot;
  r.priority = priority;
  r.deadline_mono_ns = deadline_ns;
  return r;
}

}  // namespace

TEST_CASE("identical inputs follow their leader; another input with the same hash leads") {
  Coalescer c;
  RequestRef a = request(1), b = request(2), other = request(3);
  CHECK_FALSE(c.follow_or_lead(7, "x", a));
  CHECK(a.lead != 0);
  CHECK(c.follow_or_lead(7, "x", b));          // follows
  CHECK_FALSE(c.follow_or_lead(7, "y", other));  // same hash, another input
  CHECK(other.lead != 0);
  CHECK(other.lead != a.lead);
  std::vector<RequestRef> out;
  c.settle(a.lead, shm::WireStatus::kOk, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].slot == 2);
  out.clear();
  c.settle(a.lead, shm::WireStatus::kOk, out);  // settled already: nothing
  CHECK(out.empty());
  RequestRef again = request(4);
  CHECK_FALSE(c.follow_or_lead(7, "x", again));  // "x" is no longer in flight: it leads
  CHECK(again.lead != a.lead);                     // a reused entry gets a new token
  c.settle(other.lead, shm::WireStatus::kOk, out);
  CHECK(out.empty());
}

TEST_CASE("a more urgent class leads too; the first to succeed answers all, a timeout only the last") {
  Coalescer c;
  RequestRef low = request(1, shm::WirePriority::kLow, 100), high = request(2, shm::WirePriority::kHigh, 500);
  RequestRef normal = request(3, shm::WirePriority::kNormal, 0);
  CHECK_FALSE(c.follow_or_lead(1, "in", low));
  CHECK_FALSE(c.follow_or_lead(1, "in", high));  // leads at high
  CHECK(high.lead == low.lead);
  CHECK(c.follow_or_lead(1, "in", normal));      // follows; waits without a deadline
  CHECK(c.expire_ns(low.lead) == 0);
  std::vector<RequestRef> out;
  c.settle(low.lead, shm::WireStatus::kTimeout, out);  // the low leader's own deadline: the high one goes on
  CHECK(out.empty());
  c.settle(high.lead, shm::WireStatus::kOk, out);
  REQUIRE(out.size() == 1);
  CHECK(out[0].slot == 3);
  CHECK(c.expire_ns(high.lead) == -1);
}

TEST_CASE("a long random run agrees with a plain model of what is in flight") {
  Coalescer c;
  std::mt19937_64 rng(5);
  std::map<std::string, std::pair<std::uint64_t, std::vector<std::uint32_t>>> model;  // input: token, followers
  std::uint32_t next_slot = 1;
  for (int step = 0; step < 200'000; ++step) {
    if (model.empty() || rng() % 3 != 0) {
      const std::uint64_t n = rng() % 300;
      const std::string input = "in-" + std::to_string(n);
      RequestRef r = request(next_slot++);
      const bool followed = c.follow_or_lead(n % 8, input, r);  // 8 hash values: collisions everywhere
      auto found = model.find(input);
      CHECK(followed == (found != model.end()));
      if (followed) {
        found->second.second.push_back(r.slot);
      } else {
        model[input] = {r.lead, {}};
      }
      continue;
    }
    auto pick = model.begin();
    std::advance(pick, static_cast<long>(rng() % model.size()));
    std::vector<RequestRef> out;
    c.settle(pick->second.first, shm::WireStatus::kOk, out);
    std::vector<std::uint32_t> slots;
    for (const RequestRef& r : out) slots.push_back(r.slot);
    CHECK(slots == pick->second.second);
    model.erase(pick);
  }
}

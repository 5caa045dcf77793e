// The fairness cut's arithmetic: a batch is cut only for a request of another group already in
// it, and only once that request would wait more than twice its time alone.
#include <doctest/doctest.h>

#include "daemon/batch_shares.hpp"

using namespace batchd;

namespace {

// 100 µs a batch and 1 ns a byte: a 64 KiB input costs about 65 µs of work.
CostFit fitted_cost() {
  CostFit cost;
  cost.fixed_ns = 100'000;
  cost.per_byte_ns = 1;
  cost.samples = 100;
  cost.fitted = true;
  return cost;
}

constexpr double kLeast = 50'000;  // the fair slice's floor, below the fixed cost here
constexpr uid_t kAlice = 1000;
constexpr uid_t kBob = 1001;
constexpr std::size_t kNormal = 1;
constexpr std::size_t kHigh = 0;

// Adds `count` requests of `bytes`, the i-th from tenant_of(i), checking before each that it
// would not cut the batch.
template <typename TenantOf>
void fill_uncut(BatchShares& shares, int count, std::uint64_t bytes, TenantOf tenant_of) {
  const CostFit cost = fitted_cost();
  for (int i = 0; i < count; ++i) {
    CHECK_FALSE(shares.would_double_anothers(tenant_of(i), kNormal, bytes, cost, kLeast));
    shares.add(tenant_of(i), kNormal, bytes);
  }
}

}  // namespace

TEST_CASE("one tenant's batch is never cut, however long it runs") {
  BatchShares shares;
  fill_uncut(shares, 256, 65536, [](int) { return kAlice; });
}

TEST_CASE("a light request in the batch bounds a heavy tenant's work to its own time alone") {
  BatchShares shares;
  const CostFit cost = fitted_cost();
  shares.add(kBob, kNormal, 1000);  // alone: 101 µs
  // 101 µs + 64 KiB = 166.5 µs: under 2 x 101 µs.
  CHECK_FALSE(shares.would_double_anothers(kAlice, kNormal, 65536, cost, kLeast));
  shares.add(kAlice, kNormal, 65536);
  // A second 64 KiB: 232 µs, past 202 µs: Bob would wait more than twice his time alone.
  CHECK(shares.would_double_anothers(kAlice, kNormal, 65536, cost, kLeast));
  // Bob's own next request does not wait on itself, and Alice's 66.5 µs alone is not doubled by
  // 1 KB more: both may still join.
  CHECK_FALSE(shares.would_double_anothers(kBob, kNormal, 1000, cost, kLeast));
  // A slice longer than the batch would run keeps it whole.
  CHECK_FALSE(shares.would_double_anothers(kAlice, kNormal, 65536, cost, 300'000));
}

TEST_CASE("tenants of like requests share a fixed-cost batch without a cut") {
  // A model whose batch costs mostly its fixed part (a Python worker): two tenants' small
  // requests interleaved never double either one's time alone.
  BatchShares shares;
  fill_uncut(shares, 64, 80, [](int i) { return i % 2 == 0 ? kAlice : kBob; });
}

TEST_CASE("the same tenant at another class is another group; clear() starts a new batch") {
  BatchShares shares;
  const CostFit cost = fitted_cost();
  shares.add(kAlice, kHigh, 100);
  CHECK(shares.would_double_anothers(kAlice, kNormal, 200'000, cost, kLeast));
  CHECK_FALSE(shares.would_double_anothers(kAlice, kHigh, 200'000, cost, kLeast));
  shares.clear();
  CHECK_FALSE(shares.would_double_anothers(kAlice, kNormal, 200'000, cost, kLeast));
}

TEST_CASE("groups past the table's size count as one, which only cuts sooner") {
  BatchShares shares;
  const CostFit cost = fitted_cost();
  for (uid_t u = 0; u < BatchShares::kMaxGroups + 4; ++u) shares.add(u, kNormal, 100);
  // A newcomer's 64 KiB against the smallest group's 100.1 µs alone: past twice that.
  CHECK(shares.would_double_anothers(5000, kNormal, 131072, cost, kLeast));
}

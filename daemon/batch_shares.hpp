// What each group (a tenant at one priority class) holds in the batch being filled, so that the
// fairness cut can ask what a request already in the batch would wait for the others' work. A
// batch's requests finish together: one group's work in it is every other member's wait. Drain
// thread only; fixed size, no allocation.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "daemon/cost_model.hpp"

namespace batchd {

class BatchShares {
 public:
  // Groups told apart; more in one batch are rare (a batch is cut when a second group's time
  // would double), and beyond this the rest share the last entry, which only makes it cut sooner.
  static constexpr std::size_t kMaxGroups = 8;

  void clear() noexcept { size_ = 0; }

  void add(uid_t tenant, std::size_t cls, std::uint64_t bytes) noexcept {
    Group& group = find_or_make(tenant, cls);
    ++group.count;
    group.bytes += bytes;
  }

  // Whether the batch holds a request of a group other than (tenant, cls): only then can adding
  // one of theirs make somebody wait (cheap; the cut asks it before it reads the lanes' cost).
  [[nodiscard]] bool holds_other_than(uid_t tenant, std::size_t cls) const noexcept {
    for (std::size_t g = 0; g < size_; ++g) {
      if (groups_[g].tenant != tenant || groups_[g].cls != cls) return true;
    }
    return false;
  }

  // Whether a request of (tenant, cls) with `bytes` of input would make another group's members
  // wait more than twice their time alone (the batch's fixed cost and their own work), once the
  // batch runs past `least_ns` (a batch that short is never cut). Only a group already in the
  // batch counts: a request that is not there yet joins a later batch, whose own check covers it.
  [[nodiscard]] bool would_double_anothers(uid_t tenant, std::size_t cls, std::uint64_t bytes, const CostFit& cost,
                                           double least_ns) const noexcept {
    double shortest_alone = -1;
    std::uint64_t items = 1;
    std::uint64_t total_bytes = bytes;
    for (std::size_t g = 0; g < size_; ++g) {
      const Group& group = groups_[g];
      items += group.count;
      total_bytes += group.bytes;
      if (group.tenant == tenant && group.cls == cls) continue;
      const double alone = cost.predict_ns(static_cast<double>(group.count), static_cast<double>(group.bytes));
      if (shortest_alone < 0 || alone < shortest_alone) shortest_alone = alone;
    }
    if (shortest_alone < 0) return false;  // one group: nobody else waits on this batch
    const double after = cost.predict_ns(static_cast<double>(items), static_cast<double>(total_bytes));
    return after > std::max(least_ns, 2 * shortest_alone);
  }

 private:
  struct Group {
    uid_t tenant = 0;
    std::size_t cls = 0;
    std::uint64_t count = 0;
    std::uint64_t bytes = 0;
  };

  Group& find_or_make(uid_t tenant, std::size_t cls) noexcept {
    for (std::size_t g = 0; g < size_; ++g) {
      if (groups_[g].tenant == tenant && groups_[g].cls == cls) return groups_[g];
    }
    if (size_ == kMaxGroups) return groups_[kMaxGroups - 1];
    groups_[size_] = Group{tenant, cls, 0, 0};
    return groups_[size_++];
  }

  std::array<Group, kMaxGroups> groups_{};
  std::size_t size_ = 0;
};

}  // namespace batchd

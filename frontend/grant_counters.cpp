#include "frontend/grant_counters.hpp"

#include <fmt/format.h>

#include <iterator>

namespace batchd::grants {

namespace {

struct Pair {
  Priority claimed;
  Priority granted;
};
constexpr std::array<Pair, kDowngradePairs> kPairs = {
    Pair{Priority::kHigh, Priority::kNormal}, Pair{Priority::kHigh, Priority::kLow},
    Pair{Priority::kNormal, Priority::kLow}};

}  // namespace

GrantCounts& GrantCounts::operator+=(const GrantCounts& other) noexcept {
  for (std::size_t i = 0; i < kDowngradePairs; ++i) downgrades[i] += other.downgrades[i];
  ignored_credentials += other.ignored_credentials;
  return *this;
}

std::uint64_t GrantCounts::total_downgrades() const noexcept {
  std::uint64_t total = 0;
  for (const std::uint64_t n : downgrades) total += n;
  return total;
}

void GrantCounters::downgraded(Priority claimed, Priority granted) noexcept {
  for (std::size_t i = 0; i < kDowngradePairs; ++i) {
    if (kPairs[i].claimed == claimed && kPairs[i].granted == granted) {
      downgrades_[i].fetch_add(1, std::memory_order_relaxed);
    }
  }
}

GrantCounts GrantCounters::snapshot() const noexcept {
  GrantCounts out;
  for (std::size_t i = 0; i < kDowngradePairs; ++i) out.downgrades[i] = downgrades_[i].load(std::memory_order_relaxed);
  out.ignored_credentials = ignored_.load(std::memory_order_relaxed);
  return out;
}

void render_grant_metrics(std::string& out, std::string_view prefix, const GrantCounts& counts) {
  auto to = std::back_inserter(out);
  fmt::format_to(to,
                 "# HELP {0}_priority_downgrades_total Requests that claimed a priority class above their "
                 "caller's grant and ran at the grant.\n# TYPE {0}_priority_downgrades_total counter\n",
                 prefix);
  for (std::size_t i = 0; i < kDowngradePairs; ++i) {
    fmt::format_to(to, "{}_priority_downgrades_total{{claimed=\"{}\",granted=\"{}\"}} {}\n", prefix,
                   priority_name(kPairs[i].claimed), priority_name(kPairs[i].granted), counts.downgrades[i]);
  }
  fmt::format_to(to,
                 "# HELP {0}_priority_credentials_ignored_total Requests whose credential granted nothing: an "
                 "unknown token or API key, or a grant header from a source not trusted or naming no class.\n"
                 "# TYPE {0}_priority_credentials_ignored_total counter\n{0}_priority_credentials_ignored_total {1}\n",
                 prefix, counts.ignored_credentials);
}

}  // namespace batchd::grants

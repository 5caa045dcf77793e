#include "tools/stress_stats.hpp"

#include <bit>
#include <numeric>

#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"

namespace batchd::stress {

const char* error_kind_name(std::size_t kind) noexcept {
  if (kind < kClientErrorKinds) return error_code_name(static_cast<ErrorCode>(kind));
  if (kind == kBadRequestKind) return "bad_request";
  return "unknown";
}

std::size_t error_kind_by_name(std::string_view name) noexcept {
  for (std::size_t kind = 0; kind < kErrorKinds; ++kind) {
    if (name == error_kind_name(kind)) return kind;
  }
  return kErrorKinds;
}

std::size_t LiveHistogram::bucket_of(std::uint64_t us) noexcept {
  if (us < 16) return static_cast<std::size_t>(us);
  const unsigned exponent = static_cast<unsigned>(std::bit_width(us)) - 1;  // >= 4
  const std::uint64_t step = (us >> (exponent - 3)) & 7U;
  return std::min<std::size_t>(16 + (exponent - 4) * 8 + step, kBuckets - 1);
}

std::uint64_t LiveHistogram::bucket_floor(std::size_t bucket) noexcept {
  if (bucket < 16) return bucket;
  const std::size_t exponent = (bucket - 16) / 8 + 4;
  const std::uint64_t step = (bucket - 16) % 8;
  return (8 + step) << (exponent - 3);
}

void LiveHistogram::add(std::int64_t latency_ns) noexcept {
  const std::uint64_t us = latency_ns > 0 ? static_cast<std::uint64_t>(latency_ns) / 1000 : 0;
  counts_[bucket_of(us)].fetch_add(1, std::memory_order_relaxed);
}

LiveHistogram::Counts LiveHistogram::counts() const noexcept {
  Counts out{};
  for (std::size_t i = 0; i < kBuckets; ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::uint64_t LiveHistogram::quantile_us(const Counts& counts, double q) noexcept {
  std::uint64_t total = 0;
  for (const std::uint64_t n : counts) total += n;
  if (total == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total - 1)) + 1;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) return bucket_floor(i);
  }
  return bucket_floor(kBuckets - 1);
}

void Tally::merge(Tally&& other) {
  sent += other.sent;
  ok += other.ok;
  wrong += other.wrong;
  for (std::size_t i = 0; i < kErrorKinds; ++i) errors[i] += other.errors[i];
  if (latencies_ns.empty()) {
    latencies_ns.swap(other.latencies_ns);
  } else {
    latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  }
  other.latencies_ns = {};
}

std::uint64_t Tally::error_total() const noexcept {
  return std::accumulate(errors.begin(), errors.end(), std::uint64_t{0});
}

void Tallies::merge(Tallies&& other) {
  for (std::size_t c = 0; c < by_class.size(); ++c) by_class[c].merge(std::move(other.by_class[c]));
}

void Recorder::sent(Priority priority) noexcept {
  ++tallies_[priority].sent;
  live_.sent.fetch_add(1, std::memory_order_relaxed);
}

void Recorder::answered(Priority priority, std::string_view input, std::string_view output,
                        std::int64_t latency_ns) {
  Tally& tally = tallies_[priority];
  bool right = false;
  if (expected_ != nullptr) {
    const auto it = expected_->find(std::string(input));
    right = it != expected_->end() && it->second == output;
  } else if (sim_repeat_ > 0) {
    right = output == sim_expected_output(input, sim_repeat_);
  } else {
    char expected[kDigestHexBytes];
    reference_batchstring(input, cost_, expected);
    right = output == std::string_view(expected, sizeof(expected));
  }
  if (right) {
    ++tally.ok;
  } else {
    ++tally.wrong;
    live_.wrong.fetch_add(1, std::memory_order_relaxed);
  }
  tally.latencies_ns.push_back(latency_ns);
  live_.latency.add(latency_ns);
  live_.finished.fetch_add(1, std::memory_order_relaxed);
}

void Recorder::failed_kind(Priority priority, std::size_t kind) noexcept {
  ++tallies_[priority].errors[kind];
  live_.errors.fetch_add(1, std::memory_order_relaxed);
  live_.finished.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace batchd::stress

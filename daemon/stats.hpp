// Counters the daemon keeps for logs, batchctl and the front-end's /metrics. Relaxed atomics:
// each is a statistic, not a synchronization point.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>

#include "shm/status_page.hpp"

namespace batchd {

// A duration histogram with the status page's buckets (shm::kLatencyBoundsNs): relaxed atomic
// adds, so any thread records without a lock or an allocation.
struct LatencyHistogram {
  std::array<std::atomic<std::uint64_t>, shm::kLatencyBuckets> buckets{};
  std::atomic<std::uint64_t> sum_ns{0};

  // The bucket a duration falls in: the first whose bound it does not exceed (Prometheus' "le").
  [[nodiscard]] static std::size_t bucket_of(std::int64_t ns) noexcept {
    const auto* bound = std::lower_bound(std::begin(shm::kLatencyBoundsNs), std::end(shm::kLatencyBoundsNs), ns);
    return static_cast<std::size_t>(bound - std::begin(shm::kLatencyBoundsNs));
  }
  void record(std::int64_t ns) noexcept {
    const std::int64_t clamped = ns < 0 ? 0 : ns;  // clocks of two threads: never negative
    buckets[bucket_of(clamped)].fetch_add(1, std::memory_order_relaxed);
    sum_ns.fetch_add(static_cast<std::uint64_t>(clamped), std::memory_order_relaxed);
  }
};

// Where a request's time goes (README.md, "Metrics"): its queue time by priority class (index:
// shm::WirePriority), and each successful batch run's compute time by device (devices past the
// status page's table are not recorded).
struct LatencyStats {
  std::array<LatencyHistogram, shm::kWirePriorities> queue_by_class{};
  std::array<LatencyHistogram, shm::kStatusDevices> compute_by_device{};
  // Workers: each batch's hand-off to its worker and back (its run on the lane less the model's
  // own time, as the worker reports it), by the worker's place on the status page.
  std::array<LatencyHistogram, shm::kStatusDevices> handoff_by_device{};
};

// One model's requests and batches, as Triton counts them for its nv_inference_* metrics: answers
// by outcome, and for the successful batches their runs, their requests, and the requests' summed
// queue and compute (a batch's run, once per request in it) times.
struct ModelCounters {
  std::atomic<std::uint64_t> requests_ok{0};
  std::atomic<std::uint64_t> requests_failed{0};
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> inferences{0};
  std::atomic<std::uint64_t> queue_ns{0};
  std::atomic<std::uint64_t> compute_ns{0};
  // Its batches as the daemon-wide counts below have them: by why they were flushed, and by size
  // (run, successful or not).
  std::array<std::atomic<std::uint64_t>, shm::kFlushReasons> flushes{};
  std::array<std::atomic<std::uint64_t>, shm::kBatchSizeBuckets> batch_sizes{};
  // Its policy's view, refreshed by the drain thread: the arrival rate it sees and the batch size
  // it aims at now (DaemonStats' are the default model's).
  std::atomic<std::uint64_t> arrivals_per_s{0};
  std::atomic<std::uint32_t> target_batch{0};
  // Its requests' queue times, by class (LatencyStats' count every model's).
  std::array<LatencyHistogram, shm::kWirePriorities> queue_by_class{};
  // Runs that waited for the model's turn on devices shared with other models, and how long.
  std::atomic<std::uint64_t> turns_waited{0};
  std::atomic<std::uint64_t> turn_wait_ns{0};
  // The response cache (docs/CACHE.md): hits (the clients' own, as they report them, and the
  // daemon's) and misses (requests of a cached model that ran), with the time the lookups and
  // stores took; and requests answered with an identical one's answer.
  std::atomic<std::uint64_t> cache_hits{0};
  std::atomic<std::uint64_t> cache_hit_ns{0};
  std::atomic<std::uint64_t> cache_misses{0};
  std::atomic<std::uint64_t> cache_miss_ns{0};
  std::atomic<std::uint64_t> coalesced{0};
};

// The bucket of DaemonStats::batch_sizes (and ModelCounters') a batch of `size` falls in:
// [2^b, 2^(b+1)), the last open-ended.
[[nodiscard]] inline std::size_t batch_size_bucket(std::size_t size) noexcept {
  std::size_t bucket = 0;
  while (bucket + 1 < shm::kBatchSizeBuckets && (std::size_t{2} << bucket) <= size) ++bucket;
  return bucket;
}

struct DaemonStats {
  static constexpr std::size_t kBatchSizeBuckets = shm::kBatchSizeBuckets;

  std::atomic<std::uint64_t> clients_attached{0};
  std::atomic<std::uint64_t> clients_detached{0};  // including those dropped for violations
  std::atomic<std::uint64_t> clients_dropped_for_violation{0};
  // Connections refused right after accept: their user started handshakes past its rate.
  std::atomic<std::uint64_t> connections_shed{0};
  // Worker processes (--backend workers) the daemon dropped: a protocol violation, a hang.
  std::atomic<std::uint64_t> workers_dropped{0};
  // Pieces of batches handed to a worker by copying them into its buffer: batches outside the
  // input arena (made beyond the pool, or past a slot's size). The rest it read in place.
  std::atomic<std::uint64_t> worker_pieces_copied{0};
  // Requests that claimed high priority without their user's grant, and ran at normal.
  std::atomic<std::uint64_t> priority_downgrades{0};
  std::atomic<std::uint64_t> requests_taken{0};
  // requests_taken by the class they run at (a claim above the grant counts at the grant);
  // index: shm::WirePriority.
  std::array<std::atomic<std::uint64_t>, shm::kWirePriorities> requests_taken_by_class{};
  // Refused at admission as overloaded (their deadline would pass in the backlog), by class.
  std::array<std::atomic<std::uint64_t>, shm::kWirePriorities> requests_shed_by_class{};
  std::atomic<std::uint64_t> requests_ok{0};
  std::atomic<std::uint64_t> requests_failed{0};
  std::array<ModelCounters, shm::kStatusModels> by_model{};  // index: the model's id
  std::atomic<std::uint64_t> requests_rejected{0};  // invalid, expired or withdrawn before running
  std::atomic<std::uint64_t> requests_abandoned{0};  // their client went before they were batched
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> batch_failures{0};
  std::array<std::atomic<std::uint64_t>, kBatchSizeBuckets> batch_sizes{};
  std::array<std::atomic<std::uint64_t>, shm::kFlushReasons> flushes{};  // by FlushReason
  // The adaptive policy's view, as the drain loop last refreshed it.
  std::atomic<std::uint64_t> arrivals_per_s{0};
  std::atomic<std::uint32_t> target_batch{0};
  std::array<std::atomic<std::uint64_t>, shm::kWirePriorities> arrivals_per_s_by_class{};
  LatencyStats latency;

  // Taken and neither answered nor abandoned yet: the backlog ahead of a new request.
  [[nodiscard]] std::uint64_t in_flight() const noexcept {
    constexpr auto relaxed = std::memory_order_relaxed;
    const std::uint64_t done = requests_ok.load(relaxed) + requests_failed.load(relaxed) +
                               requests_abandoned.load(relaxed);
    const std::uint64_t taken = requests_taken.load(relaxed);
    return taken > done ? taken - done : 0;
  }

  // A batch of `model` (an id; kStatusModels or more: none) ran, or failed.
  void record_batch(std::size_t size, std::uint32_t model) noexcept {
    const std::size_t bucket = batch_size_bucket(size);
    batches.fetch_add(1, std::memory_order_relaxed);
    batch_sizes[bucket].fetch_add(1, std::memory_order_relaxed);
    if (model < by_model.size()) by_model[model].batch_sizes[bucket].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace batchd

// The front-end's own counters, one set per event loop, and their rendering in the Prometheus
// text format together with what the daemon publishes about itself.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "client_lib/client.hpp"
#include "frontend/grant_counters.hpp"
#include "frontend/http_api.hpp"

namespace batchd::http {

// A metric family's # HELP and # TYPE lines, for every writer of the /metrics page.
void metric_family(std::string& out, std::string_view name, std::string_view type, std::string_view help);

// Status codes counted under their own label; anything else counts as "other".
inline constexpr std::array<unsigned, 12> kCountedStatuses = {200, 202, 400, 404, 405, 408,
                                                              413, 429, 431, 500, 503, 504};
// Upper bounds of the latency histogram's buckets, in seconds (Prometheus' "le").
inline constexpr std::array<double, 14> kLatencyBucketsS = {0.0005, 0.001, 0.002, 0.005, 0.01,
                                                            0.02,   0.05,  0.1,   0.2,   0.5,
                                                            1.0,    2.0,   5.0,   10.0};

// One event loop's counters. Only its loop writes them (so relaxed atomics suffice: there is one
// writer and readers want a recent value, not a consistent cut); any loop reads them for /metrics.
class WorkerMetrics {
 public:
  void record_response(unsigned status, std::int64_t latency_ns) noexcept;
  void add_in_flight(std::int64_t delta) noexcept { in_flight_.fetch_add(delta, relaxed); }
  void connection_accepted() noexcept { accepted_connections_.fetch_add(1, relaxed); }
  void connection_rejected() noexcept { rejected_connections_.fetch_add(1, relaxed); }
  void answer_dropped() noexcept { dropped_answers_.fetch_add(1, relaxed); }
  void set_attached(bool attached) noexcept { attached_.store(attached, relaxed); }
  [[nodiscard]] grants::GrantCounters& grants() noexcept { return grants_; }
  // One Open Inference Protocol inference of `model` (its id) answered: whether it succeeded, how
  // long it took and how many strings it carried.
  void record_inference(std::uint32_t model, bool ok, std::int64_t latency_ns, std::size_t strings) noexcept {
    inferences_.record(model, ok, latency_ns, strings);
  }

 private:
  static constexpr auto relaxed = std::memory_order_relaxed;
  friend class MetricsRegistry;

  std::array<std::atomic<std::uint64_t>, kCountedStatuses.size() + 1> by_status_{};  // last: other
  std::array<std::atomic<std::uint64_t>, kLatencyBucketsS.size() + 1> latency_buckets_{};  // last: +Inf
  std::atomic<std::uint64_t> latency_sum_ns_{0};
  std::atomic<std::int64_t> in_flight_{0};  // submitted to the daemon, not yet answered
  std::atomic<std::uint64_t> accepted_connections_{0};
  std::atomic<std::uint64_t> rejected_connections_{0};  // over --max-connections
  std::atomic<std::uint64_t> dropped_answers_{0};       // the caller had gone
  std::atomic<bool> attached_{false};                   // this loop has a daemon client
  oip::ModelInferCounters inferences_;  // the /v2 inferences, by model
  grants::GrantCounters grants_;   // priority claims above the caller's grant
};

// Every loop's counters, created before the loops start and read by all of them.
class MetricsRegistry {
 public:
  explicit MetricsRegistry(unsigned workers);

  [[nodiscard]] WorkerMetrics& worker(unsigned index) noexcept { return workers_[index]; }
  // Counts a new connection unless the process already has `max`; any loop.
  [[nodiscard]] bool try_open_connection(std::uint32_t max) noexcept;
  void connection_closed() noexcept { open_connections_.fetch_sub(1, std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t open_connections() const noexcept {
    return open_connections_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t in_flight() const noexcept;
  // Loops attached to the daemon right now.
  [[nodiscard]] unsigned attached_workers() const noexcept;
  [[nodiscard]] unsigned workers() const noexcept { return count_; }
  // Every loop's inferences, summed.
  [[nodiscard]] InferStatistics infer_statistics(std::uint32_t model) const noexcept;

  // The Prometheus text exposition: the front-end's series, then the daemon's from `status`
  // (nullptr while no daemon is attached).
  [[nodiscard]] std::string render(const DaemonStatus* status) const;

 private:
  void render_http(std::string& out) const;
  void render_connections(std::string& out) const;

  unsigned count_;
  std::unique_ptr<WorkerMetrics[]> workers_;
  std::atomic<std::int64_t> open_connections_{0};  // process-wide, for --max-connections
};

}  // namespace batchd::http

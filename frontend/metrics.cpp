#include "frontend/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "status/status_metrics.hpp"

namespace batchd::http {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

template <class T>
void sample(std::string& out, std::string_view name, T value) {
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

}  // namespace

void metric_family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void WorkerMetrics::record_response(unsigned status, std::int64_t latency_ns) noexcept {
  std::size_t slot = kCountedStatuses.size();
  for (std::size_t i = 0; i < kCountedStatuses.size(); ++i) {
    if (kCountedStatuses[i] == status) slot = i;
  }
  by_status_[slot].fetch_add(1, relaxed);
  const double seconds = static_cast<double>(latency_ns) / 1e9;
  std::size_t bucket = 0;
  while (bucket < kLatencyBucketsS.size() && seconds > kLatencyBucketsS[bucket]) ++bucket;
  latency_buckets_[bucket].fetch_add(1, relaxed);
  latency_sum_ns_.fetch_add(static_cast<std::uint64_t>(latency_ns < 0 ? 0 : latency_ns), relaxed);
}


MetricsRegistry::MetricsRegistry(unsigned workers)
    : count_(workers), workers_(std::make_unique<WorkerMetrics[]>(workers)) {}

bool MetricsRegistry::try_open_connection(std::uint32_t max) noexcept {
  std::int64_t open = open_connections_.load(relaxed);
  do {
    if (open >= static_cast<std::int64_t>(max)) return false;
  } while (!open_connections_.compare_exchange_weak(open, open + 1, relaxed));
  return true;
}

std::int64_t MetricsRegistry::in_flight() const noexcept {
  std::int64_t total = 0;
  for (unsigned w = 0; w < count_; ++w) total += workers_[w].in_flight_.load(relaxed);
  return total;
}

InferStatistics MetricsRegistry::infer_statistics(std::uint32_t model) const noexcept {
  InferStatistics s;
  for (unsigned w = 0; w < count_; ++w) s += workers_[w].inferences_.snapshot(model);
  return s;
}

unsigned MetricsRegistry::attached_workers() const noexcept {
  unsigned total = 0;
  for (unsigned w = 0; w < count_; ++w) total += workers_[w].attached_.load(relaxed) ? 1 : 0;
  return total;
}

std::string MetricsRegistry::render(const DaemonStatus* status) const {
  std::string out;
  out.reserve(8192);
  render_http(out);
  render_daemon_status(status, out);
  return out;
}

void MetricsRegistry::render_http(std::string& out) const {
  metric_family(out, "batchd_http_requests_total", "counter", "HTTP requests answered, by status code.");
  for (std::size_t i = 0; i <= kCountedStatuses.size(); ++i) {
    std::uint64_t n = 0;
    for (unsigned w = 0; w < count_; ++w) n += workers_[w].by_status_[i].load(relaxed);
    const std::string code = i < kCountedStatuses.size() ? std::to_string(kCountedStatuses[i]) : "other";
    fmt::format_to(std::back_inserter(out), "batchd_http_requests_total{{code=\"{}\"}} {}\n", code, n);
  }
  metric_family(out, "batchd_http_request_duration_seconds", "histogram",
                "Time from a request's last byte to its answer being ready.");
  std::uint64_t cumulative = 0;
  std::uint64_t sum_ns = 0;
  for (std::size_t b = 0; b <= kLatencyBucketsS.size(); ++b) {
    for (unsigned w = 0; w < count_; ++w) cumulative += workers_[w].latency_buckets_[b].load(relaxed);
    const std::string le = b < kLatencyBucketsS.size() ? fmt::format("{}", kLatencyBucketsS[b]) : "+Inf";
    fmt::format_to(std::back_inserter(out), "batchd_http_request_duration_seconds_bucket{{le=\"{}\"}} {}\n", le,
                   cumulative);
  }
  for (unsigned w = 0; w < count_; ++w) sum_ns += workers_[w].latency_sum_ns_.load(relaxed);
  sample(out, "batchd_http_request_duration_seconds_sum", static_cast<double>(sum_ns) / 1e9);
  sample(out, "batchd_http_request_duration_seconds_count", cumulative);
  render_connections(out);
  grants::GrantCounts grant_counts;
  for (unsigned w = 0; w < count_; ++w) grant_counts += workers_[w].grants_.snapshot();
  grants::render_grant_metrics(out, "batchd_http", grant_counts);
}

void MetricsRegistry::render_connections(std::string& out) const {
  auto sum = [&](auto member) {
    std::uint64_t total = 0;
    for (unsigned w = 0; w < count_; ++w) total += static_cast<std::uint64_t>((workers_[w].*member).load(relaxed));
    return total;
  };
  metric_family(out, "batchd_http_requests_in_flight", "gauge", "Requests submitted to the daemon and not yet answered.");
  sample(out, "batchd_http_requests_in_flight", in_flight());
  metric_family(out, "batchd_http_connections_open", "gauge", "Open client connections.");
  sample(out, "batchd_http_connections_open", open_connections());
  metric_family(out, "batchd_http_connections_accepted_total", "counter", "Client connections accepted.");
  sample(out, "batchd_http_connections_accepted_total", sum(&WorkerMetrics::accepted_connections_));
  metric_family(out, "batchd_http_connections_rejected_total", "counter",
                "Client connections refused over --max-connections or during shutdown.");
  sample(out, "batchd_http_connections_rejected_total", sum(&WorkerMetrics::rejected_connections_));
  metric_family(out, "batchd_http_answers_dropped_total", "counter",
                "Answers that arrived after their caller had disconnected.");
  sample(out, "batchd_http_answers_dropped_total", sum(&WorkerMetrics::dropped_answers_));
  metric_family(out, "batchd_http_workers_attached", "gauge", "Event loops attached to the daemon.");
  sample(out, "batchd_http_workers_attached", attached_workers());
  metric_family(out, "batchd_http_workers", "gauge", "Event loops.");
  sample(out, "batchd_http_workers", count_);
}

}  // namespace batchd::http

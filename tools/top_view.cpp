#include "tools/top_view.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace batchd::top {

namespace {

// Counters only grow while one daemon runs; a restarted daemon starts again from zero, and a
// frame across the restart shows its counts since then rather than a huge negative number.
double delta(std::uint64_t before, std::uint64_t now) {
  return now >= before ? static_cast<double>(now - before) : static_cast<double>(now);
}

std::string duration_text(double ns) {
  if (ns >= 1e6) return fmt::format("{:.2f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

std::uint64_t total(const std::array<std::uint64_t, kPriorityClasses>& by_class) {
  return std::accumulate(by_class.begin(), by_class.end(), std::uint64_t{0});
}

// The interval's counts per bucket: now's minus before's (all of now's across a restart).
std::vector<double> interval_counts(const std::vector<std::uint64_t>& before, const std::vector<std::uint64_t>& now) {
  std::vector<double> out(now.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = delta(i < before.size() ? before[i] : 0, now[i]);
  return out;
}

void add_counts(std::vector<double>& into, const std::vector<double>& counts) {
  if (into.size() < counts.size()) into.resize(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) into[i] += counts[i];
}

// The q-quantile of the counts, as Prometheus's histogram_quantile() reads it (linear within the
// bucket it falls in), so top and the dashboard agree; "-" without counts, "> last bound" when it
// falls in the +Inf bucket.
std::string quantile_text(const std::vector<std::int64_t>& bounds, const std::vector<double>& counts, double q) {
  const double count = std::accumulate(counts.begin(), counts.end(), 0.0);
  if (count == 0 || bounds.empty()) return "-";
  const double rank = q * count;
  double below = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (below + counts[i] >= rank && counts[i] > 0) {
      if (i >= bounds.size()) return "> " + duration_text(static_cast<double>(bounds.back()));
      const double lower = i == 0 ? 0.0 : static_cast<double>(bounds[i - 1]);
      const double upper = static_cast<double>(bounds[i]);
      return duration_text(lower + (upper - lower) * (rank - below) / counts[i]);
    }
    below += counts[i];
  }
  return "-";
}

}  // namespace

std::vector<Line> frame(const DaemonStatus& before, const DaemonStatus& now, double seconds, unsigned width) {
  const double per_s = seconds > 0 ? 1.0 / seconds : 0.0;
  const bool same_daemon = before.daemon_pid == now.daemon_pid;
  const DaemonStatus empty;
  const DaemonStatus& b = same_daemon ? before : empty;
  auto rate = [&](std::uint64_t was, std::uint64_t is) { return delta(was, is) * per_s; };

  std::vector<Line> out;
  out.push_back({fmt::format("batchd top: backend {} (pid {}), {} of {} devices healthy, {} clients, policy {}",
                             now.backend, now.daemon_pid, now.healthy_devices, now.devices.size(), now.clients,
                             now.policy),
                 true});
  out.push_back({fmt::format("requests/s: {:.0f} answered ok, {:.0f} failed; {} in flight; arriving {}/s "
                             "(high {} / normal {} / low {})",
                             rate(b.requests_ok, now.requests_ok), rate(b.requests_failed, now.requests_failed),
                             now.in_flight, now.arrivals_per_s, now.arrivals_per_s_by_class[0],
                             now.arrivals_per_s_by_class[1], now.arrivals_per_s_by_class[2])});
  // requests_failed counts every request answered with an error; those refused before running
  // (overloaded, shed, no device) are a part of it, the rest failed on a device.
  const double refused = rate(b.requests_rejected, now.requests_rejected);
  const double failed = rate(b.requests_failed, now.requests_failed);
  std::uint64_t timeouts_before = 0, timeouts_now = 0;
  for (const auto& dev : b.devices) timeouts_before += dev.timeouts;
  for (const auto& dev : now.devices) timeouts_now += dev.timeouts;
  out.push_back({fmt::format("errors/s: {:.0f} refused before running (shed as overloaded {:.0f}), {:.0f} failed "
                             "on a device, {:.0f} abandoned by their client",
                             refused, rate(total(b.requests_shed_by_class), total(now.requests_shed_by_class)),
                             std::max(0.0, failed - refused), rate(b.requests_abandoned, now.requests_abandoned))});
  out.push_back({fmt::format("          device timeouts {:.0f}, dead letters {:.0f}", rate(timeouts_before, timeouts_now),
                             rate(b.dead_letters, now.dead_letters))});
  // The response cache this interval (docs/CACHE.md), over every model that uses it.
  std::uint64_t hits_before = 0, hits_now = 0, misses_before = 0, misses_now = 0, coalesced_before = 0,
                coalesced_now = 0;
  for (const auto& m : b.models) {
    hits_before += m.cache_hits;
    misses_before += m.cache_misses;
    coalesced_before += m.coalesced;
  }
  bool cached = false;
  for (const auto& m : now.models) {
    hits_now += m.cache_hits;
    misses_now += m.cache_misses;
    coalesced_now += m.coalesced;
    cached = cached || m.cache_enabled;
  }
  if (cached || coalesced_now > 0) {
    const double hits = rate(hits_before, hits_now), misses = rate(misses_before, misses_now);
    out.push_back({fmt::format("cache/s: {:.0f} hits, {:.0f} misses ({:.1f} % hits), {:.0f} coalesced; {} entries",
                               hits, misses, hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0.0,
                               rate(coalesced_before, coalesced_now), now.cache_entries)});
  }
  // Where this interval's latency went: waiting for a batch to start, and the batch's run.
  const auto& bounds = now.latency_bounds_ns;
  std::vector<double> queue_all;
  std::string queue_by_class;
  for (std::size_t c = 0; c < kPriorityClasses; ++c) {
    const auto counts = interval_counts(b.queue_time_by_class[c].buckets, now.queue_time_by_class[c].buckets);
    add_counts(queue_all, counts);
    queue_by_class += fmt::format("{}{} {}", c == 0 ? "" : ", ", priority_name(static_cast<Priority>(c)),
                                  quantile_text(bounds, counts, 0.99));
  }
  std::vector<double> compute_all;
  std::vector<std::vector<double>> compute_by_device(now.devices.size());
  const std::vector<std::uint64_t> none;
  for (std::size_t d = 0; d < now.devices.size(); ++d) {
    compute_by_device[d] = interval_counts(d < b.devices.size() ? b.devices[d].compute_time.buckets : none,
                                           now.devices[d].compute_time.buckets);
    add_counts(compute_all, compute_by_device[d]);
  }
  if (bounds.empty()) {
    out.push_back({"latency: this daemon publishes no histograms"});
  } else {
    out.push_back({fmt::format("queue time (taken -> batch start): p50 {}, p99 {} (p99 by class: {})",
                               quantile_text(bounds, queue_all, 0.5), quantile_text(bounds, queue_all, 0.99),
                               queue_by_class)});
    out.push_back({fmt::format("compute time (a batch's run):      p50 {}, p99 {}", quantile_text(bounds, compute_all, 0.5),
                               quantile_text(bounds, compute_all, 0.99))});
  }
  out.push_back({""});

  // The interval's batches by size, one bar per power-of-two bucket that saw any.
  const double batches = delta(b.batches, now.batches);
  out.push_back({fmt::format("batches: {:.0f}/s, {:.0f} failed; about {} requests per batch targeted; sizes this "
                             "interval:",
                             batches * per_s, rate(b.batch_failures, now.batch_failures), now.target_batch),
                 true});
  const std::vector<double> sizes = interval_counts(b.batch_sizes, now.batch_sizes);
  const double largest = sizes.empty() ? 0.0 : *std::max_element(sizes.begin(), sizes.end());
  const unsigned bar_room = std::clamp(width, 40U, 92U) - 32;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    const auto bar = static_cast<std::size_t>(sizes[i] / largest * bar_room + 0.5);
    out.push_back({fmt::format("  {:>5}..{:<5} {:>8.0f} {}", 1U << i, (2U << i) - 1, sizes[i],
                               std::string(std::max<std::size_t>(bar, 1), '#'))});
  }
  if (largest == 0) out.push_back({"  (no batches this interval)"});
  out.push_back({""});

  // A row per model where the daemon serves more than one: its answers, its waiting requests, and
  // the mean queue and compute time of the requests its batches answered this interval.
  if (now.models.size() > 1) {
    out.push_back({fmt::format("{:<20}{:<13}{:>8}{:>10}{:>10}{:>9}{:>13}{:>13}", "model", "state", "lanes", "ok/s",
                               "failed/s", "pending", "queue/req", "compute/req"),
                   true});
    for (std::size_t m = 0; m < now.models.size(); ++m) {
      const DaemonStatus::Model& model = now.models[m];
      const DaemonStatus::Model zero;
      const DaemonStatus::Model& was = m < b.models.size() && b.models[m].name == model.name ? b.models[m] : zero;
      const double inferences = delta(was.inferences, model.inferences);
      const auto per_request = [&](std::uint64_t before_ns, std::uint64_t now_ns) {
        return inferences > 0 ? duration_text(delta(before_ns, now_ns) / inferences) : std::string("-");
      };
      out.push_back({fmt::format("{:<20}{:<13}{:>8}{:>10.0f}{:>10.0f}{:>9}{:>13}{:>13}", model.name, model.state,
                                 model.lanes, rate(was.requests_ok, model.requests_ok),
                                 rate(was.requests_failed, model.requests_failed), model.pending,
                                 per_request(was.queue_ns, model.queue_ns),
                                 per_request(was.compute_ns, model.compute_ns))});
    }
    out.push_back({""});
  }

  out.push_back({fmt::format("{:<7}{:<11}{:>10}{:>7}{:>13}{:>13}{:>13}  {}", "device", "state", "batches/s", "share",
                             "outstanding", "batch time", "p99 compute", "fitted cost"),
                 true});
  double all_rate = 0;
  for (std::size_t d = 0; d < now.devices.size(); ++d) {
    all_rate += rate(d < b.devices.size() ? b.devices[d].batches_ok : 0, now.devices[d].batches_ok);
  }
  for (std::size_t d = 0; d < now.devices.size(); ++d) {
    const auto& dev = now.devices[d];
    const std::uint64_t ok_before = d < b.devices.size() ? b.devices[d].batches_ok : 0;
    const bool fitted = dev.fixed_ns > 0 || dev.per_item_ns > 0 || dev.per_byte_ns > 0;
    const double batches_per_s = rate(ok_before, dev.batches_ok);
    // A laggard's state says so: it gets only what it would finish first, and probes.
    const std::string state = dev.laggard && dev.state == "healthy" ? "laggard" : dev.state;
    out.push_back({fmt::format("{:<7}{:<11}{:>10.0f}{:>6.0f}%{:>13}{:>13}{:>13}  {}", d, state, batches_per_s,
                               all_rate > 0 ? 100 * batches_per_s / all_rate : 0.0, dev.outstanding_requests,
                               dev.batch_ns == 0 ? std::string("-") : duration_text(static_cast<double>(dev.batch_ns)),
                               quantile_text(bounds, compute_by_device[d], 0.99),
                               (fitted ? fmt::format("{} + {}/request", duration_text(dev.fixed_ns),
                                                     duration_text(dev.per_item_ns))
                                       : std::string("not fitted yet")) +
                                   (dev.worker_pid != 0 ? fmt::format("  worker {} {} pid {}", dev.worker_name,
                                                                      dev.worker_version, dev.worker_pid)
                                                        : std::string()))});
  }
  for (auto& line : out) {
    if (line.text.size() > width) line.text.resize(width);
  }
  return out;
}

}  // namespace batchd::top

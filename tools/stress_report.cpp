#include "tools/stress_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace batchd::stress {

namespace {

// Nearest rank: the smallest sample with at least q of all samples at or below it.
double percentile_us(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  // The epsilon keeps 0.99 * 100 (99.000000000000014 in binary) from rounding up to 100.
  const auto rank =
      static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size()) - 1e-9));
  const std::size_t index = std::clamp<std::size_t>(rank, 1, sorted.size()) - 1;
  return static_cast<double>(sorted[index]) / 1000.0;
}

std::string load_description(const Options& options) {
  std::string text = options.mode == Mode::kOpen
                         ? (options.shape.is_constant()
                                ? fmt::format("open loop at {} req/s", options.shape.mean_rate())
                                : fmt::format("open loop shaped {} (mean {:.0f} req/s)", options.shape.describe(),
                                              options.shape.mean_rate()))
                         : fmt::format("closed loop with {} thread{}", options.threads,
                                       options.threads == 1 ? "" : "s");
  if (options.transport == TransportKind::kHttp) {
    fmt::format_to(std::back_inserter(text), " over HTTP ({}) to {} ({} connections", protocol_name(options),
                   options.http_url, options.connections);
    if (options.mode == Mode::kOpen) {
      fmt::format_to(std::back_inserter(text), ", pipeline depth {}", options.pipeline_depth);
    }
    text += ')';
  } else if (options.transport == TransportKind::kGrpc) {
    fmt::format_to(std::back_inserter(text), " over gRPC to {} ({} channels)", options.grpc_target,
                   options.connections);
  }
  return text;
}

// The transport and, over HTTP or gRPC, the protocol and its settings, as JSON members each
// followed by a comma.
std::string transport_json(const Options& options) {
  std::string text = fmt::format("\"transport\":\"{}\",", transport_name(options.transport));
  if (options.transport == TransportKind::kShm) return text;
  fmt::format_to(std::back_inserter(text), "\"protocol\":\"{}\",\"connections\":{},", protocol_name(options),
                 options.connections);
  if (options.transport == TransportKind::kHttp) {
    fmt::format_to(std::back_inserter(text), "\"pipeline_depth\":{},",
                   options.mode == Mode::kOpen ? options.pipeline_depth : 1U);
  }
  return text;
}

// Percentiles of `sorted` into c.
void set_percentiles(const std::vector<std::int64_t>& sorted, Counts& c) {
  c.samples = sorted.size();
  c.p50_us = percentile_us(sorted, 0.50);
  c.p90_us = percentile_us(sorted, 0.90);
  c.p99_us = percentile_us(sorted, 0.99);
  c.p999_us = percentile_us(sorted, 0.999);
  c.max_us = sorted.empty() ? 0.0 : static_cast<double>(sorted.back()) / 1000.0;
}

// One class's counts; its samples must be sorted.
void count(const Tally& tally, Counts& c) {
  c.sent = tally.sent;
  c.ok = tally.ok;
  c.wrong = tally.wrong;
  c.errors = tally.error_total();
  c.errors_by_kind = tally.errors;
  set_percentiles(tally.latencies_ns, c);
}

// {"timeout":N,...}: every kind, so a script finds each key whatever happened.
std::string errors_json(const Counts& c) {
  std::string kinds;
  for (std::size_t i = 0; i < kErrorKinds; ++i) {
    fmt::format_to(std::back_inserter(kinds), "{}\"{}\":{}", i == 0 ? "" : ",", error_kind_name(i),
                   c.errors_by_kind[i]);
  }
  return kinds;
}

// "by_class":{"high":{...},...}: the classes that were sent, each with its counts and latency.
std::string by_class_json(const Summary& s) {
  std::string text = "\"by_class\":{";
  bool first = true;
  for (const Priority p : kAllPriorities) {
    const Counts& c = s.by_class[static_cast<std::size_t>(p)];
    if (c.sent == 0) continue;
    fmt::format_to(std::back_inserter(text),
                   "{}\"{}\":{{\"sent\":{},\"ok\":{},\"errors\":{},\"wrong\":{},\"errors_by_kind\":{{{}}},"
                   "\"latency_samples\":{},\"p50_us\":{:.3f},\"p90_us\":{:.3f},\"p99_us\":{:.3f},"
                   "\"p999_us\":{:.3f},\"max_us\":{:.3f}}}",
                   first ? "" : ",", priority_name(p), c.sent, c.ok, c.errors, c.wrong, errors_json(c),
                   c.samples, c.p50_us, c.p90_us, c.p99_us, c.p999_us, c.max_us);
    first = false;
  }
  text += '}';
  return text;
}

// Each class that was sent, in one line (and its errors by kind under it).
void print_classes(std::FILE* out, const Summary& s) {
  for (const Priority p : kAllPriorities) {
    const Counts& c = s.by_class[static_cast<std::size_t>(p)];
    if (c.sent == 0) continue;
    fmt::print(out, "  class {:<6} sent {}  ok {}  wrong {}  errors {}", priority_name(p), c.sent, c.ok,
               c.wrong, c.errors);
    if (c.samples > 0) {
      fmt::print(out, "  latency us p50 {:.1f}  p99 {:.1f}  max {:.1f}", c.p50_us, c.p99_us, c.max_us);
    }
    fmt::print(out, "\n");
    for (std::size_t i = 0; i < kErrorKinds; ++i) {
      if (c.errors_by_kind[i] == 0) continue;
      fmt::print(out, "    {:<20} {}\n", error_kind_name(i), c.errors_by_kind[i]);
    }
  }
}

}  // namespace

Summary summarize(RunResult& result) {
  Summary s;
  for (const Priority p : kAllPriorities) {
    Tally& tally = result.tallies[p];
    std::sort(tally.latencies_ns.begin(), tally.latencies_ns.end());
    Counts& c = s.by_class[static_cast<std::size_t>(p)];
    count(tally, c);
    s.sent += c.sent;
    s.ok += c.ok;
    s.wrong += c.wrong;
    s.errors += c.errors;
    for (std::size_t i = 0; i < kErrorKinds; ++i) s.errors_by_kind[i] += c.errors_by_kind[i];
  }
  // All classes' samples in one sorted vector, each class's given up as it is added: taken over
  // without a copy while only one class has any (a run without --priority-mix).
  std::vector<std::int64_t> all;
  for (Tally& tally : result.tallies.by_class) {
    if (all.empty()) {
      all.swap(tally.latencies_ns);
      continue;
    }
    const auto middle = static_cast<std::ptrdiff_t>(all.size());
    all.insert(all.end(), tally.latencies_ns.begin(), tally.latencies_ns.end());
    tally.latencies_ns = {};
    std::inplace_merge(all.begin(), all.begin() + middle, all.end());
  }
  set_percentiles(all, s);
  s.wall_s = result.wall_s;
  s.rps = result.wall_s > 0 ? static_cast<double>(s.ok + s.wrong + s.errors) / result.wall_s : 0.0;
  return s;
}

void print_text(std::FILE* out, const Summary& s, const Options& options) {
  fmt::print(out, "batchd-stress: {}, {:.3f} s, cost {}, inputs {}..{} bytes, seed {}\n",
             load_description(options), s.wall_s, options.cost, options.min_input_bytes,
             options.max_input_bytes, options.seed);
  if (!options.models.empty()) fmt::print(out, "  models, in turn: {}\n", fmt::join(options.models, ", "));
  fmt::print(out, "  sent {}  ok {}  wrong {}  errors {}  throughput {:.1f} req/s\n", s.sent, s.ok,
             s.wrong, s.errors, s.rps);
  for (std::size_t i = 0; i < kErrorKinds; ++i) {
    if (s.errors_by_kind[i] == 0) continue;
    fmt::print(out, "    {:<20} {}\n", error_kind_name(i), s.errors_by_kind[i]);
  }
  if (s.samples == 0) {
    fmt::print(out, "  latency: no answered requests\n");
  } else {
    fmt::print(out, "  latency us ({} answered{}): p50 {:.1f}  p90 {:.1f}  p99 {:.1f}  p99.9 {:.1f}  max {:.1f}\n",
               s.samples, options.mode == Mode::kOpen ? ", from intended send time" : "", s.p50_us,
               s.p90_us, s.p99_us, s.p999_us, s.max_us);
  }
  print_classes(out, s);
}

void print_json(std::FILE* out, const Summary& s, const Options& options) {
  // Error and class names and the transport are fixed identifiers and everything else is a
  // number: nothing needs escaping (the URL is left out for that reason).
  fmt::print(out,
             "{{\"mode\":\"{}\",{}\"threads\":{},\"rate\":{},\"duration_s\":{:.6f},\"cost\":{},"
             "\"seed\":{},\"sent\":{},\"ok\":{},\"errors\":{},\"wrong\":{},\"errors_by_kind\":{{{}}},"
             "\"rps\":{:.3f},\"latency_samples\":{},\"p50_us\":{:.3f},\"p90_us\":{:.3f},"
             "\"p99_us\":{:.3f},\"p999_us\":{:.3f},\"max_us\":{:.3f},\"priority_mix\":\"{}\",{}}}\n",
             mode_name(options.mode), transport_json(options),
             options.mode == Mode::kClosed ? options.threads : 0U,
             options.mode == Mode::kOpen ? options.shape.mean_rate() : 0.0, s.wall_s, options.cost, options.seed,
             s.sent, s.ok, s.errors, s.wrong, errors_json(s), s.rps, s.samples, s.p50_us, s.p90_us,
             s.p99_us, s.p999_us, s.max_us, options.priority_mix.describe(), by_class_json(s));
}

}  // namespace batchd::stress

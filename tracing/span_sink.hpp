// Where finished spans go (docs/TRACING.md): batchd's own description of a span, made after the
// fact from the times a request carries, with ids batchd chose, so that a batch's span and the
// spans of the requests it served can name each other whatever order they are made in. The
// OpenTelemetry SDK behind it (otel_span_sink.cpp) exports them over OTLP; a build without it
// has no sink (span_sink_off.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "shm/trace_context.hpp"
#include "tracing/trace_options.hpp"

namespace batchd::tracing {

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;

struct Attribute {
  std::string_view key;
  std::variant<std::string_view, std::int64_t, bool> value;
};

enum class SpanKind : std::uint8_t { kInternal, kServer, kClient };

struct SpanData {
  std::string_view name;
  SpanKind kind = SpanKind::kInternal;
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_id{};  // all zero: a root
  std::int64_t start_ns = 0;  // CLOCK_MONOTONIC
  std::int64_t end_ns = 0;
  std::span<const Attribute> attributes;
  std::span<const shm::TraceContext> links;  // spans this one is causally tied to (a batch's requests)
  std::string_view error;  // set: the span's status is an error, with this description
};

// What a sink has done, for the metrics: a collector that is down or slow costs spans, never a
// request, and the count says how many.
struct SinkCounts {
  std::uint64_t emitted = 0;   // handed to the exporter's queue
  std::uint64_t exported = 0;  // the collector took them
  std::uint64_t failed = 0;    // an export failed (collector down, slow past its timeout, refused)
};

class SpanSink {
 public:
  virtual ~SpanSink() = default;
  // Queues a finished span for export; never waits for the collector (a full queue drops it).
  // Any thread.
  virtual void emit(const SpanData& span) noexcept = 0;
  [[nodiscard]] virtual SinkCounts counts() const noexcept = 0;
};

// The sink `options` ask for (options.enabled), named `service` unless OTEL_SERVICE_NAME or a
// resource attribute says otherwise; nullptr with `error` set where it cannot be made (a build
// without OpenTelemetry, a bad endpoint).
[[nodiscard]] std::unique_ptr<SpanSink> open_span_sink(const TraceOptions& options, std::string_view service,
                                                       std::string& error);

// Fresh random ids, never all zero (W3C: such an id is invalid). Any thread.
[[nodiscard]] TraceId random_trace_id() noexcept;
[[nodiscard]] SpanId random_span_id() noexcept;

}  // namespace batchd::tracing

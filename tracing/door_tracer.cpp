#include "tracing/door_tracer.hpp"

#include <stdexcept>
#include <string>

namespace batchd::tracing {

DoorTracer::DoorTracer(const TraceOptions& options, std::unique_ptr<SpanSink> sink)
    : settings_(true, options.rate, options.count), sink_(std::move(sink)) {}

ServerSpan DoorTracer::begin(const shm::TraceContext* caller, bool caller_sampled, std::string_view model,
                             std::int64_t now_ns) noexcept {
  ServerSpan span;
  if (!settings_.decide(model, caller != nullptr && caller_sampled)) return span;
  // A caller's context that it does not sample still names the trace this request belongs to.
  if (caller != nullptr) {
    span.trace_id = caller->trace_id;
    span.parent_id = caller->span_id;
  } else {
    span.trace_id = random_trace_id();
  }
  span.span_id = random_span_id();
  span.start_ns = now_ns;
  return span;
}

void DoorTracer::end(const ServerSpan& span, std::string_view name, std::span<const Attribute> attributes,
                     std::string_view error, std::int64_t now_ns) noexcept {
  if (!span.traced()) return;
  SpanData data;
  data.name = name;
  data.kind = SpanKind::kServer;
  data.trace_id = span.trace_id;
  data.span_id = span.span_id;
  data.parent_id = span.parent_id;
  data.start_ns = span.start_ns;
  data.end_ns = now_ns;
  data.attributes = attributes;
  data.error = error;
  sink_->emit(data);
}

std::unique_ptr<DoorTracer> open_door_tracer(const TraceOptions& options, std::string_view service) {
  if (!options.enabled) return nullptr;
  std::string why;
  std::unique_ptr<SpanSink> sink = open_span_sink(options, service, why);
  if (!sink) throw std::runtime_error("cannot trace: " + why);
  return std::make_unique<DoorTracer>(options, std::move(sink));
}

}  // namespace batchd::tracing

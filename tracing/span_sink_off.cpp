// A build without OpenTelemetry (meson -Dtracing=disabled, or no opentelemetry-cpp-dev): no sink.
#include "tracing/span_sink.hpp"

namespace batchd::tracing {

std::unique_ptr<SpanSink> open_span_sink(const TraceOptions& options, std::string_view /*service*/,
                                         std::string& error) {
  error = options.enabled ? "this build has no tracing (meson -Dtracing=enabled, with opentelemetry-cpp-dev)"
                          : "tracing is off";
  return nullptr;
}

}  // namespace batchd::tracing

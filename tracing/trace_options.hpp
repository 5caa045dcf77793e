// How a process traces (docs/TRACING.md): the same flags on batchd, batchd-http and batchd-grpc,
// and the standard OTEL_* environment variables where a flag is not given, as any OpenTelemetry
// SDK reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace batchd::tracing {

struct TraceOptions {
  bool enabled = false;   // spans are exported at all: --trace-endpoint, or OTEL_TRACES_EXPORTER=otlp
  std::string endpoint;   // OTLP: http(s)://HOST:PORT/v1/traces, or HOST:PORT for gRPC
  std::string protocol;   // "http/protobuf" (the default) or "grpc"
  // Of the requests that come without a sampled trace context, one in `rate` is traced (0: none;
  // 1: all); a request whose caller samples it is traced whatever the rate.
  static constexpr std::uint64_t kRateUnset = ~std::uint64_t{0};
  std::uint64_t rate = kRateUnset;  // finish_trace_options sets it
  std::int64_t count = -1;  // traces started here at most, then none (-1: no limit), as Triton's trace_count
  std::vector<std::string> resource;  // KEY=VALUE resource attributes, besides OTEL_RESOURCE_ATTRIBUTES'
};

// --trace-endpoint, --trace-protocol, --trace-rate, --trace-count, --trace-resource.
void add_trace_flags(CLI::App& app, TraceOptions& options);

// After parsing: what the flags left unset, from the environment (OTEL_TRACES_EXPORTER,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// or OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER_ARG with a traceidratio sampler). Tracing
// turned on by an endpoint alone traces every request unless a rate says otherwise. Throws
// std::invalid_argument for a value it cannot use.
void finish_trace_options(TraceOptions& options);

}  // namespace batchd::tracing

#include "tracing/trace_options.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace batchd::tracing {
namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

// OTEL_TRACES_SAMPLER's samplers as a rate; none where it names none of these.
std::uint64_t rate_from_sampler(const std::string& sampler, const std::string& argument) {
  if (sampler == "always_on" || sampler == "parentbased_always_on") return 1;
  if (sampler == "always_off" || sampler == "parentbased_always_off") return 0;
  if (sampler == "traceidratio" || sampler == "parentbased_traceidratio") {
    char* end = nullptr;
    const double ratio = argument.empty() ? 1.0 : std::strtod(argument.c_str(), &end);
    if (!argument.empty() && (end == argument.c_str() || *end != '\0' || !(ratio >= 0 && ratio <= 1))) {
      throw std::invalid_argument("OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, got '" + argument + "'");
    }
    return ratio == 0 ? 0 : static_cast<std::uint64_t>(std::llround(1.0 / ratio));
  }
  if (!sampler.empty()) throw std::invalid_argument("OTEL_TRACES_SAMPLER '" + sampler + "' is not one batchd takes");
  return TraceOptions::kRateUnset;
}

}  // namespace

void add_trace_flags(CLI::App& app, TraceOptions& options) {
  auto* group = app.add_option_group("tracing", "OpenTelemetry traces over OTLP (docs/TRACING.md)");
  group->add_option("--trace-endpoint", options.endpoint,
                    "export spans to this OTLP collector (http://HOST:4318/v1/traces; with --trace-protocol grpc, "
                    "HOST:4317); default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, and none (no tracing)");
  group->add_option("--trace-protocol", options.protocol, "http/protobuf or grpc (default: OTEL_EXPORTER_OTLP_PROTOCOL)")
      ->check(CLI::IsMember({"http/protobuf", "grpc"}));
  group->add_option("--trace-rate", options.rate,
                    "trace 1 in N of the requests that come without a sampled trace context (0: only those that "
                    "come with one; default 1 once tracing is on)");
  group->add_option("--trace-count", options.count, "trace this many requests at most, then none (-1: no limit)")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 62));
  group->add_option("--trace-resource", options.resource,
                    "KEY=VALUE: a resource attribute of this process's spans (repeatable; besides "
                    "OTEL_RESOURCE_ATTRIBUTES)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void finish_trace_options(TraceOptions& options) {
  const std::string exporter = environment("OTEL_TRACES_EXPORTER");
  const bool endpoint_flag = !options.endpoint.empty();  // a flag beats every variable
  if (options.endpoint.empty()) {
    options.endpoint = environment("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  }
  const std::string protocol_env = !environment("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").empty()
                                       ? environment("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                                       : environment("OTEL_EXPORTER_OTLP_PROTOCOL");
  if (options.protocol.empty()) {
    if (!protocol_env.empty() && protocol_env != "http/protobuf" && protocol_env != "grpc") {
      throw std::invalid_argument("OTEL_EXPORTER_OTLP_PROTOCOL '" + protocol_env +
                                  "' is not one batchd takes (http/protobuf or grpc)");
    }
    options.protocol = protocol_env.empty() ? "http/protobuf" : protocol_env;
  }
  const bool grpc = options.protocol == "grpc";
  if (options.endpoint.empty() && !environment("OTEL_EXPORTER_OTLP_ENDPOINT").empty()) {
    // The signal-less endpoint is a base: OTLP/HTTP adds the traces path to it.
    std::string base = environment("OTEL_EXPORTER_OTLP_ENDPOINT");
    while (!grpc && !base.empty() && base.back() == '/') base.pop_back();
    options.endpoint = grpc ? base : base + "/v1/traces";
  }
  if (exporter == "none" && !endpoint_flag) {
    options.enabled = false;
  } else {
    options.enabled = !options.endpoint.empty() || exporter == "otlp";
    if (!exporter.empty() && exporter != "otlp" && exporter != "none") {
      throw std::invalid_argument("OTEL_TRACES_EXPORTER '" + exporter + "' is not one batchd takes (otlp or none)");
    }
  }
  if (options.enabled && options.endpoint.empty()) {
    options.endpoint = grpc ? "localhost:4317" : "http://localhost:4318/v1/traces";
  }
  if (options.rate == TraceOptions::kRateUnset) {
    options.rate = rate_from_sampler(environment("OTEL_TRACES_SAMPLER"), environment("OTEL_TRACES_SAMPLER_ARG"));
  }
  if (options.rate == TraceOptions::kRateUnset) options.rate = options.enabled ? 1 : 0;
  for (const std::string& attribute : options.resource) {
    if (attribute.find('=') == std::string::npos || attribute.front() == '=') {
      throw std::invalid_argument("--trace-resource expects KEY=VALUE, got '" + attribute + "'");
    }
  }
}

}  // namespace batchd::tracing

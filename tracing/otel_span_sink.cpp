// The span sink over the OpenTelemetry C++ SDK: a tracer provider whose batch span processor
// exports over OTLP (HTTP or gRPC) on a thread of its own. Spans are made whole at once, with the
// times and ids batchd gives them: an id generator hands the SDK the ids batchd chose for the span
// being made (the SDK has no other way in for them).
#include <opentelemetry/exporters/otlp/otlp_grpc_exporter_factory.h>
#include <opentelemetry/exporters/otlp/otlp_grpc_exporter_options.h>
#include <opentelemetry/exporters/otlp/otlp_http_exporter_factory.h>
#include <opentelemetry/exporters/otlp/otlp_http_exporter_options.h>
#include <opentelemetry/sdk/resource/resource.h>
#include <opentelemetry/sdk/trace/batch_span_processor_factory.h>
#include <opentelemetry/sdk/trace/batch_span_processor_options.h>
#include <opentelemetry/sdk/trace/exporter.h>
#include <opentelemetry/sdk/trace/id_generator.h>
#include <opentelemetry/sdk/trace/samplers/always_on_factory.h>
#include <opentelemetry/sdk/trace/tracer_provider.h>
#include <opentelemetry/sdk/trace/tracer_provider_factory.h>
#include <opentelemetry/trace/span_context_kv_iterable.h>
#include <opentelemetry/trace/tracer.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "shm/clock.hpp"
#include "tracing/span_sink.hpp"

namespace batchd::tracing {
namespace {

namespace otel = opentelemetry;
namespace sdk = opentelemetry::sdk;

// The ids of the span being made on this thread; the SDK asks for them while it makes it.
thread_local TraceId next_trace_id{};
thread_local SpanId next_span_id{};

otel::trace::SpanId otel_id(const SpanId& id) noexcept {
  return otel::trace::SpanId(otel::nostd::span<const std::uint8_t, 8>(id.data(), id.size()));
}
otel::trace::TraceId otel_id(const TraceId& id) noexcept {
  return otel::trace::TraceId(otel::nostd::span<const std::uint8_t, 16>(id.data(), id.size()));
}

class ChosenIds final : public sdk::trace::IdGenerator {
 public:
  ChosenIds() : IdGenerator(true) {}
  otel::trace::SpanId GenerateSpanId() noexcept override { return otel_id(next_span_id); }
  otel::trace::TraceId GenerateTraceId() noexcept override { return otel_id(next_trace_id); }
};

// What the exporter's thread did, shared by the sink and the exporter (which the SDK owns).
struct ExportCounts {
  std::atomic<std::uint64_t> exported{0};
  std::atomic<std::uint64_t> failed{0};
};

// Counts what the real exporter did with each batch of spans.
class CountingExporter final : public sdk::trace::SpanExporter {
 public:
  CountingExporter(std::unique_ptr<sdk::trace::SpanExporter> inner, std::shared_ptr<ExportCounts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  std::unique_ptr<sdk::trace::Recordable> MakeRecordable() noexcept override { return inner_->MakeRecordable(); }
  sdk::common::ExportResult Export(
      const otel::nostd::span<std::unique_ptr<sdk::trace::Recordable>>& spans) noexcept override {
    const std::size_t n = spans.size();
    const sdk::common::ExportResult result = inner_->Export(spans);
    (result == sdk::common::ExportResult::kSuccess ? counts_->exported : counts_->failed)
        .fetch_add(n, std::memory_order_relaxed);
    return result;
  }
  bool ForceFlush(std::chrono::microseconds timeout) noexcept override { return inner_->ForceFlush(timeout); }
  bool Shutdown(std::chrono::microseconds timeout) noexcept override { return inner_->Shutdown(timeout); }

 private:
  std::unique_ptr<sdk::trace::SpanExporter> inner_;
  std::shared_ptr<ExportCounts> counts_;
};

class Attributes final : public otel::common::KeyValueIterable {
 public:
  explicit Attributes(std::span<const Attribute> attributes) : attributes_(attributes) {}
  bool ForEachKeyValue(otel::nostd::function_ref<bool(otel::nostd::string_view, otel::common::AttributeValue)> callback)
      const noexcept override {
    for (const Attribute& a : attributes_) {
      const otel::common::AttributeValue value = std::visit(
          [](const auto& v) -> otel::common::AttributeValue {
            if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string_view>) {
              return otel::nostd::string_view(v.data(), v.size());
            } else {
              return v;
            }
          },
          a.value);
      if (!callback(otel::nostd::string_view(a.key.data(), a.key.size()), value)) return false;
    }
    return true;
  }
  size_t size() const noexcept override { return attributes_.size(); }

 private:
  std::span<const Attribute> attributes_;
};

otel::trace::SpanContext remote_context(const TraceId& trace, const SpanId& span) {
  return otel::trace::SpanContext(otel_id(trace), otel_id(span),
                                  otel::trace::TraceFlags(otel::trace::TraceFlags::kIsSampled), true);
}

class Links final : public otel::trace::SpanContextKeyValueIterable {
 public:
  explicit Links(std::span<const shm::TraceContext> links) : links_(links) {}
  bool ForEachKeyValue(otel::nostd::function_ref<bool(otel::trace::SpanContext, const otel::common::KeyValueIterable&)>
                           callback) const noexcept override {
    const otel::common::NoopKeyValueIterable none;
    for (const shm::TraceContext& link : links_) {
      if (!callback(remote_context(link.trace_id, link.span_id), none)) return false;
    }
    return true;
  }
  size_t size() const noexcept override { return links_.size(); }

 private:
  std::span<const shm::TraceContext> links_;
};

otel::trace::SpanKind kind_of(SpanKind kind) {
  switch (kind) {
    case SpanKind::kServer: return otel::trace::SpanKind::kServer;
    case SpanKind::kClient: return otel::trace::SpanKind::kClient;
    case SpanKind::kInternal: break;
  }
  return otel::trace::SpanKind::kInternal;
}

class OtelSpanSink final : public SpanSink {
 public:
  OtelSpanSink(std::unique_ptr<sdk::trace::TracerProvider> provider, std::shared_ptr<ExportCounts> counts)
      : provider_(std::move(provider)), tracer_(provider_->GetTracer("batchd")), counts_(std::move(counts)) {}
  ~OtelSpanSink() override {
    // What is queued goes out now, within the exporter's own timeout.
    provider_->ForceFlush(std::chrono::seconds(2));
    provider_->Shutdown();
  }

  void emit(const SpanData& span) noexcept override {
    // CLOCK_MONOTONIC is steady_clock here; the wall-clock time is the same distance back from now.
    const std::int64_t mono_now = shm::monotonic_ns();
    const auto wall_now = std::chrono::system_clock::now();
    const auto wall_at = [&](std::int64_t mono_ns) {
      return otel::common::SystemTimestamp(wall_now - std::chrono::nanoseconds(mono_now - mono_ns));
    };
    otel::trace::StartSpanOptions options;
    options.kind = kind_of(span.kind);
    options.start_system_time = wall_at(span.start_ns);
    options.start_steady_time = otel::common::SteadyTimestamp(std::chrono::nanoseconds(span.start_ns));
    const bool root = span.parent_id == SpanId{};
    if (root) {
      otel::context::Context context;
      options.parent = context.SetValue(otel::trace::kIsRootSpanKey, true);
    } else {
      options.parent = remote_context(span.trace_id, span.parent_id);
    }
    next_trace_id = span.trace_id;
    next_span_id = span.span_id;
    otel::nostd::shared_ptr<otel::trace::Span> made =
        tracer_->StartSpan(otel::nostd::string_view(span.name.data(), span.name.size()), Attributes(span.attributes),
                           Links(span.links), options);
    if (!span.error.empty()) {
      made->SetStatus(otel::trace::StatusCode::kError, otel::nostd::string_view(span.error.data(), span.error.size()));
    }
    otel::trace::EndSpanOptions end;
    end.end_steady_time = otel::common::SteadyTimestamp(std::chrono::nanoseconds(span.end_ns));
    made->End(end);
    emitted_.fetch_add(1, std::memory_order_relaxed);
  }

  SinkCounts counts() const noexcept override {
    return {emitted_.load(std::memory_order_relaxed), counts_->exported.load(std::memory_order_relaxed),
            counts_->failed.load(std::memory_order_relaxed)};
  }

 private:
  std::unique_ptr<sdk::trace::TracerProvider> provider_;
  otel::nostd::shared_ptr<otel::trace::Tracer> tracer_;
  std::shared_ptr<ExportCounts> counts_;
  std::atomic<std::uint64_t> emitted_{0};
};

sdk::resource::Resource make_resource(const TraceOptions& options, std::string_view service) {
  sdk::resource::ResourceAttributes attributes;
  const char* env_service = std::getenv("OTEL_SERVICE_NAME");
  const char* env_attributes = std::getenv("OTEL_RESOURCE_ATTRIBUTES");
  const bool named = (env_service != nullptr && *env_service != '\0') ||
                     (env_attributes != nullptr && std::strstr(env_attributes, "service.name=") != nullptr);
  if (!named) attributes.SetAttribute("service.name", std::string(service));
  for (const std::string& pair : options.resource) {
    const std::size_t equals = pair.find('=');
    attributes.SetAttribute(pair.substr(0, equals), pair.substr(equals + 1));
  }
  // Create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, as every SDK does.
  return sdk::resource::Resource::Create(attributes);
}

}  // namespace

std::unique_ptr<SpanSink> open_span_sink(const TraceOptions& options, std::string_view service, std::string& error) {
  if (!options.enabled) {
    error = "tracing is off";
    return nullptr;
  }
  try {
    std::unique_ptr<sdk::trace::SpanExporter> exporter;
    if (options.protocol == "grpc") {
      otel::exporter::otlp::OtlpGrpcExporterOptions grpc;
      grpc.endpoint = options.endpoint;
      exporter = otel::exporter::otlp::OtlpGrpcExporterFactory::Create(grpc);
    } else {
      otel::exporter::otlp::OtlpHttpExporterOptions http;
      http.url = options.endpoint;
      exporter = otel::exporter::otlp::OtlpHttpExporterFactory::Create(http);
    }
    auto counts = std::make_shared<ExportCounts>();
    sdk::trace::BatchSpanProcessorOptions batching;
    batching.max_queue_size = 8192;  // a burst of traced requests (4 spans each) waits here, or is dropped
    batching.schedule_delay_millis = std::chrono::milliseconds(200);
    batching.max_export_batch_size = 1024;
    auto processor = sdk::trace::BatchSpanProcessorFactory::Create(
        std::make_unique<CountingExporter>(std::move(exporter), counts), batching);
    auto provider = sdk::trace::TracerProviderFactory::Create(std::move(processor), make_resource(options, service),
                                                              sdk::trace::AlwaysOnSamplerFactory::Create(),
                                                              std::make_unique<ChosenIds>());
    return std::make_unique<OtelSpanSink>(std::move(provider), std::move(counts));
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

}  // namespace batchd::tracing

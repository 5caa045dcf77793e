#include "daemon/request_tracer.hpp"

#include <fmt/format.h>

#include <array>
#include <bit>

#include "shm/clock.hpp"

namespace batchd {
namespace {

using tracing::Attribute;
using tracing::SpanData;

const char* class_name(shm::WirePriority priority) noexcept {
  switch (priority) {
    case shm::WirePriority::kHigh: return "high";
    case shm::WirePriority::kLow: return "low";
    case shm::WirePriority::kNormal: break;
  }
  return "normal";
}

}  // namespace

RequestTracer::RequestTracer(const tracing::TraceOptions& options, std::unique_ptr<tracing::SpanSink> sink)
    : sampler_(options.rate, options.count), sink_(std::move(sink)) {}

void RequestTracer::decide(shm::TraceContext& trace) noexcept {
  if (trace.valid()) {
    if (!sampler_.take()) trace = {};
    return;
  }
  trace = {};
  if (!sampler_.sample()) return;
  trace.trace_id = tracing::random_trace_id();  // a root: its span id stays zero
}

void RequestTracer::set_model(std::uint32_t id, const std::string& name, const std::string& version) {
  std::lock_guard lock(models_mu_);
  if (models_.size() <= id) models_.resize(id + 1);
  models_[id] = ModelName{name, version};
}

RequestTracer::ModelName RequestTracer::model_name(std::uint32_t id) const {
  std::lock_guard lock(models_mu_);
  return id < models_.size() ? models_[id] : ModelName{};
}

void RequestTracer::emit_request(const RequestRef& request, const tracing::SpanId& span_id, const ModelName& model,
                                 std::int64_t end_ns, std::string_view error, const Batch* batch,
                                 const shm::TraceContext* batch_span) noexcept {
  const std::string request_id = fmt::format("{:016x}", request.request_id);
  const std::int64_t retries =
      batch == nullptr ? 0 : std::popcount(batch->failed_devices) + static_cast<std::int64_t>(batch->device_faults);
  std::array<Attribute, 8> attributes{{
      {"triton.model_name", std::string_view(model.name)},
      {"triton.model_version", std::string_view(model.version)},
      {"triton.request_id", std::string_view(request_id)},
      {"batchd.priority", std::string_view(class_name(request.priority))},
      {"batchd.retries", retries},
      {"batchd.device", batch == nullptr ? std::int64_t{-1} : std::int64_t{batch->run_device}},
      {"batchd.batch.size", batch == nullptr ? std::int64_t{0} : static_cast<std::int64_t>(batch->size())},
      {"batchd.ran", batch != nullptr},
  }};
  SpanData span;
  span.name = "batchd request";
  span.trace_id = request.trace.trace_id;
  span.span_id = span_id;
  span.parent_id = request.trace.span_id;
  span.start_ns = request.arrival_ns;
  span.end_ns = end_ns;
  span.attributes = attributes;
  span.error = error;
  sink_->emit(span);
  if (batch == nullptr) return;
  // Its wait for a run, and the run: children of its span.
  const auto child = [&](std::string_view name, std::int64_t start_ns, std::int64_t child_end_ns) {
    SpanData c;
    c.name = name;
    c.trace_id = request.trace.trace_id;
    c.span_id = tracing::random_span_id();
    c.parent_id = span_id;
    c.start_ns = start_ns;
    c.end_ns = std::max(start_ns, child_end_ns);
    return c;
  };
  const SpanData wait = child("batchd queue", request.arrival_ns, batch->run_started_ns);
  sink_->emit(wait);
  const std::array<shm::TraceContext, 1> back{*batch_span};
  const std::array<Attribute, 2> run_attributes{{
      {"batchd.device", std::int64_t{batch->run_device}},
      {"batchd.batch.size", static_cast<std::int64_t>(batch->size())},
  }};
  SpanData run = child("batchd run", wait.end_ns, end_ns);
  run.attributes = run_attributes;
  run.links = back;
  run.error = error;
  sink_->emit(run);
}

void RequestTracer::batch_ran(const Batch& batch, std::string_view error) noexcept {
  std::size_t traced_count = 0;
  for (const RequestRef& request : batch.requests) traced_count += traced(request.trace) ? 1 : 0;
  if (traced_count == 0) return;
  try {
    const std::int64_t end_ns = shm::monotonic_ns();
    const ModelName model = model_name(batch.requests.front().model);
    // Its trace is its own; its span links to each traced request's span, whose ids are chosen first.
    const shm::TraceContext batch_span{tracing::random_trace_id(), tracing::random_span_id()};
    std::vector<shm::TraceContext> request_spans;
    request_spans.reserve(traced_count);
    for (const RequestRef& request : batch.requests) {
      if (traced(request.trace)) request_spans.push_back({request.trace.trace_id, tracing::random_span_id()});
    }
    const std::array<Attribute, 6> attributes{{
        {"triton.model_name", std::string_view(model.name)},
        {"triton.model_version", std::string_view(model.version)},
        {"batchd.batch.size", static_cast<std::int64_t>(batch.size())},
        {"batchd.batch.traced_requests", static_cast<std::int64_t>(traced_count)},
        {"batchd.batch.input_bytes", static_cast<std::int64_t>(batch.input_bytes.size())},
        {"batchd.device", std::int64_t{batch.run_device}},
    }};
    SpanData span;
    span.name = "batchd batch";
    span.trace_id = batch_span.trace_id;
    span.span_id = batch_span.span_id;
    span.start_ns = batch.run_started_ns != 0 ? batch.run_started_ns : end_ns;
    span.end_ns = end_ns;
    span.attributes = attributes;
    span.links = request_spans;
    span.error = error;
    sink_->emit(span);
    std::size_t next = 0;
    for (const RequestRef& request : batch.requests) {
      if (!traced(request.trace)) continue;
      emit_request(request, request_spans[next++].span_id, model, end_ns, error, &batch, &batch_span);
    }
  } catch (...) {  // out of memory for the links: the spans go, the answers are written already
  }
}

void RequestTracer::answered_unrun(const RequestRef& request, shm::WireStatus status, std::string_view why) noexcept {
  if (!traced(request.trace)) return;
  try {
    emit_request(request, tracing::random_span_id(), model_name(request.model), shm::monotonic_ns(),
                 status == shm::WireStatus::kOk ? std::string_view() : why, nullptr, nullptr);
  } catch (...) {
  }
}

}  // namespace batchd

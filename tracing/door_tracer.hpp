// Tracing at a door (batchd-http, batchd-grpc): a traced request gets a server span, a child of
// its caller's span (W3C traceparent) or a root, and the daemon gets that span as the request's
// parent in its slot. Whether a request is traced: its caller sampled it, or the sampler picks it,
// as the trace settings (global or the model's, changeable at run time) say (docs/TRACING.md).
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "shm/trace_context.hpp"
#include "tracing/span_sink.hpp"
#include "tracing/trace_options.hpp"
#include "tracing/trace_settings.hpp"

namespace batchd::tracing {

// A traced request's server span while it is answered; none (the default) when not traced.
struct ServerSpan {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_id{};  // the caller's; zero: a root
  std::int64_t start_ns = 0;

  [[nodiscard]] bool traced() const noexcept { return trace_id != TraceId{}; }
  // What the daemon is handed: this span, as the parent of its own.
  [[nodiscard]] shm::TraceContext for_daemon() const noexcept {
    return traced() ? shm::TraceContext{trace_id, span_id} : shm::TraceContext{};
  }
};

class DoorTracer {
 public:
  DoorTracer(const TraceOptions& options, std::unique_ptr<SpanSink> sink);

  // A request for `model` (empty: one not named, or not known yet) comes in at now_ns with the
  // caller's context, if it sent a valid one.
  [[nodiscard]] ServerSpan begin(const shm::TraceContext* caller, bool caller_sampled, std::string_view model,
                                 std::int64_t now_ns) noexcept;
  // It is answered: its span goes out, named `name`, with `attributes`, an error when `error` is set.
  void end(const ServerSpan& span, std::string_view name, std::span<const Attribute> attributes,
           std::string_view error, std::int64_t now_ns) noexcept;

  [[nodiscard]] TraceSettings& settings() noexcept { return settings_; }
  [[nodiscard]] SinkCounts counts() const noexcept { return sink_->counts(); }

 private:
  TraceSettings settings_;
  std::unique_ptr<SpanSink> sink_;
};

// The door's tracer where `options` turn tracing on, its spans named `service`; nullptr where they
// do not. Throws std::runtime_error saying why it cannot be made.
[[nodiscard]] std::unique_ptr<DoorTracer> open_door_tracer(const TraceOptions& options, std::string_view service);

}  // namespace batchd::tracing

// Traces requests in the daemon (docs/TRACING.md). A traced request (its caller's context came in
// its slot, or the sampler picked it) gets, once answered, a span of its own (a child of the
// caller's span, or a root) with its wait for a batch and its run as children. Each run of a batch
// that served a traced request gets one batch span, in a trace of its own, linked to each such
// request's span; each request's run span links back to it (OpenTelemetry's rule for batches).
// Spans are made from the times requests and batches carry, when they are answered: nothing is
// held open meanwhile, and a request nobody traces costs a test of its trace id. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/batch.hpp"
#include "shm/layout.hpp"
#include "tracing/span_sink.hpp"
#include "tracing/trace_options.hpp"
#include "tracing/trace_sampler.hpp"

namespace batchd {

class RequestTracer {
 public:
  RequestTracer(const tracing::TraceOptions& options, std::unique_ptr<tracing::SpanSink> sink);

  // Whether a request is traced: `trace` as its slot gave it (an invalid context is none). One
  // with its caller's context is, while the count lasts; one without, when the sampler picks
  // it, in a trace of its own (a root: no parent span). Clears `trace` for one that is not.
  // Drain thread.
  void decide(shm::TraceContext& trace) noexcept;

  // A model's name and version for the spans of its requests (start, load).
  void set_model(std::uint32_t id, const std::string& name, const std::string& version);

  // A batch ran (its answers are written): spans of its traced requests and of itself.
  // `error`: the run's, for all of them. Any thread.
  void batch_ran(const Batch& batch, std::string_view error) noexcept;
  // A request answered without a run of its own (refused, timed out waiting, no device, answered
  // from the daemon's cache): its span, with the error if any. Any thread.
  void answered_unrun(const RequestRef& request, shm::WireStatus status, std::string_view why) noexcept;

  [[nodiscard]] tracing::TraceSampler& sampler() noexcept { return sampler_; }
  [[nodiscard]] tracing::SinkCounts counts() const noexcept { return sink_->counts(); }

  // A request carries a trace when its trace id is set (its span id is its parent's, zero for a
  // root).
  [[nodiscard]] static bool traced(const shm::TraceContext& trace) noexcept {
    return trace.trace_id != decltype(trace.trace_id){};
  }

 private:
  struct ModelName {
    std::string name, version;
  };
  [[nodiscard]] ModelName model_name(std::uint32_t id) const;
  // The request's own span; `children` adds its wait and its run (linked to the batch's span).
  void emit_request(const RequestRef& request, const tracing::SpanId& span_id, const ModelName& model,
                    std::int64_t end_ns, std::string_view error, const Batch* batch,
                    const shm::TraceContext* batch_span) noexcept;

  tracing::TraceSampler sampler_;
  std::unique_ptr<tracing::SpanSink> sink_;
  mutable std::mutex models_mu_;
  std::vector<ModelName> models_;  // by id; guarded by models_mu_
};

}  // namespace batchd

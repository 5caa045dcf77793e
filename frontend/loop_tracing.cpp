// The event loop's server spans (docs/TRACING.md): a request's W3C traceparent header names its
// caller's span; a traced request's span is the parent the daemon is handed, and ends with the
// answer, named and described as OpenTelemetry's HTTP conventions have it.
#include <algorithm>
#include <array>
#include <cstdio>
#include <span>

#include "client_lib/traceparent.hpp"
#include "frontend/loop_internal.hpp"
#include "oip/model.hpp"

namespace batchd::http {

tracing::ServerSpan EventLoop::begin_trace(const Request& request, std::string_view model) noexcept {
  if (context_.tracer == nullptr) return {};
  const auto header = request.find("traceparent");
  std::optional<TraceParent> caller;
  // A header given twice is not one traceparent (W3C): the request is as if it had none.
  if (header != request.end() && request.count("traceparent") == 1) {
    caller = parse_traceparent(std::string_view(header->value().data(), header->value().size()));
  }
  // /v1/batchstring names no model: its settings are the default model's.
  if (model.empty()) model = oip::default_model().name;
  return context_.tracer->begin(caller ? &caller->context : nullptr, caller && caller->sampled, model, now_ns_);
}

void EventLoop::end_trace(const tracing::ServerSpan& span, std::string_view route, std::string_view model,
                          unsigned status) noexcept {
  if (!span.traced() || context_.tracer == nullptr) return;
  char name[96];
  const int length = std::snprintf(name, sizeof name, "POST %.*s", static_cast<int>(route.size()), route.data());
  const std::string_view span_name(name, static_cast<std::size_t>(std::clamp(length, 0, int{sizeof name} - 1)));
  const std::array<tracing::Attribute, 4> attributes{{
      {"http.request.method", std::string_view("POST")},
      {"http.route", route},
      {"http.response.status_code", static_cast<std::int64_t>(status)},
      {"triton.model_name", model},  // where the route names it
  }};
  // OpenTelemetry's HTTP server rule: a 5xx is the server's error, a 4xx the caller's.
  char error[16] = {};
  if (status >= 500) std::snprintf(error, sizeof error, "%u", status);
  context_.tracer->end(span, span_name, std::span(attributes).first(model.empty() ? 3 : 4), error, now_ns_);
}

}  // namespace batchd::http

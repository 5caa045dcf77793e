// W3C Trace Context's traceparent (https://www.w3.org/TR/trace-context/#traceparent-header), as
// the doors take it from a caller (an HTTP header, gRPC metadata, a client's argument) and hand
// it to the daemon in a request's slot.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "shm/trace_context.hpp"

namespace batchd {

struct TraceParent {
  shm::TraceContext context;  // the trace, and the caller's span: the parent of what is traced here
  bool sampled = false;       // the caller traces it: so must every hop
};

// A traceparent value, or none where it is not one: version 00 is exactly
// 00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zero; a later version may carry more after
// a '-', which is ignored; version ff is invalid.
[[nodiscard]] std::optional<TraceParent> parse_traceparent(std::string_view value) noexcept;

// Version 00 of it.
[[nodiscard]] std::string format_traceparent(const shm::TraceContext& context, bool sampled);

}  // namespace batchd

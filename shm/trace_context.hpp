// A request's W3C trace context as it crosses shared memory: the trace it belongs to and the span
// that is its parent (the caller's, or the front-end's server span). Only a request the daemon is
// to trace carries one; all zero is none (what every older client writes: the slot's padding).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace batchd::shm {

struct TraceContext {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};  // the parent's

  // W3C: an all-zero trace id or span id is invalid, so it can stand for "none".
  [[nodiscard]] bool valid() const noexcept {
    const auto nonzero = [](std::uint8_t b) { return b != 0; };
    return std::any_of(trace_id.begin(), trace_id.end(), nonzero) && std::any_of(span_id.begin(), span_id.end(), nonzero);
  }
  friend bool operator==(const TraceContext&, const TraceContext&) = default;
};

}  // namespace batchd::shm

// Span and trace ids: random, from a per-thread generator seeded once from the kernel's entropy.
#include <sys/random.h>

#include <random>

#include "shm/clock.hpp"
#include "tracing/span_sink.hpp"

namespace batchd::tracing {
namespace {

std::mt19937_64& generator() noexcept {
  thread_local std::mt19937_64 rng = [] {
    std::uint64_t seed = 0;
    if (::getrandom(&seed, sizeof seed, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof seed)) {
      seed = static_cast<std::uint64_t>(shm::monotonic_ns()) ^ reinterpret_cast<std::uintptr_t>(&seed);
    }
    return std::mt19937_64(seed);
  }();
  return rng;
}

template <std::size_t N>
std::array<std::uint8_t, N> random_id() noexcept {
  std::array<std::uint8_t, N> id{};
  while (id == std::array<std::uint8_t, N>{}) {
    for (std::size_t i = 0; i < N; i += 8) {
      const std::uint64_t word = generator()();
      for (std::size_t b = 0; b < 8 && i + b < N; ++b) id[i + b] = static_cast<std::uint8_t>(word >> (8 * b));
    }
  }
  return id;
}

}  // namespace

TraceId random_trace_id() noexcept { return random_id<16>(); }
SpanId random_span_id() noexcept { return random_id<8>(); }

}  // namespace batchd::tracing

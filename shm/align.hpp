// Rounding sizes and offsets up to an alignment: a cache line for what two processes write side by
// side, a page for what is mapped, locked or given back to the kernel on its own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace batchd::shm {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint64_t kPageBytes = 4096;

constexpr std::uint64_t round_up(std::uint64_t value, std::uint64_t align) noexcept {
  return (value + align - 1) / align * align;
}
constexpr std::uint64_t round_up_to_page(std::uint64_t value) noexcept { return round_up(value, kPageBytes); }
constexpr std::uint64_t round_down_to_page(std::uint64_t value) noexcept { return value / kPageBytes * kPageBytes; }

}  // namespace batchd::shm

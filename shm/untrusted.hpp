// Single reads and writes of words that another process may change at any moment. Each read
// happens exactly once (the compiler may not re-load it after it was checked), which is what
// "read an index once, then bounds-check it" needs.
#pragma once

#include <cstdint>
#include <type_traits>

namespace batchd::shm {

template <class T>
[[nodiscard]] inline T load_once(const T& word) noexcept {
  static_assert(std::is_integral_v<T>);
  return __atomic_load_n(&word, __ATOMIC_RELAXED);
}

template <class T>
inline void store_once(T& word, T value) noexcept {
  static_assert(std::is_integral_v<T>);
  __atomic_store_n(&word, value, __ATOMIC_RELAXED);
}

}  // namespace batchd::shm

// A vector of trivially copyable values that lives in a fixed piece of memory it is given (a slot of
// the input arena, daemon/input_arena.hpp, which worker processes read in place) while it fits,
// and on the heap past that; clear() brings it back to the fixed piece. Only what Batch uses of
// std::vector's interface. Not copyable: two vectors must never share a piece.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>

namespace batchd {

template <class T>
class ArenaVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  ArenaVector() = default;
  ArenaVector(const ArenaVector&) = delete;
  ArenaVector& operator=(const ArenaVector&) = delete;

  // Precondition: empty. A capacity of 0 keeps it on the heap.
  void place_in(T* at, std::size_t capacity) noexcept {
    fixed_ = capacity > 0 ? at : nullptr;
    fixed_capacity_ = fixed_ != nullptr ? capacity : 0;
    heap_.reset();
    data_ = fixed_;
    capacity_ = fixed_capacity_;
  }
  // Whether the values are in the fixed piece (a worker can read them there).
  [[nodiscard]] bool in_place() const noexcept { return data_ != nullptr && data_ == fixed_; }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] T* data() noexcept { return data_; }
  [[nodiscard]] const T* data() const noexcept { return data_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  operator std::span<const T>() const noexcept { return {data_, size_}; }  // NOLINT: a view, as vector's

  // Appends n values left for the caller to write, and returns where they go.
  T* grow_by(std::size_t n) {
    std::unique_ptr<T[]> old;
    reserve(size_ + n, old);
    T* at = data_ + size_;
    size_ += n;
    return at;
  }
  void push_back(T value) { *grow_by(1) = value; }
  // `first` may point into this vector's own values: a spilled array is freed after the copy.
  void append(const T* first, std::size_t n) {
    if (n == 0) return;
    std::unique_ptr<T[]> old;
    reserve(size_ + n, old);
    std::memcpy(data_ + size_, first, n * sizeof(T));
    size_ += n;
  }
  // `first` may not point into this vector's own values.
  void assign(const T* first, std::size_t n) {
    size_ = 0;
    append(first, n);
  }
  void assign_one(T value) {
    size_ = 0;
    push_back(value);
  }
  // Shrinks only.
  void truncate(std::size_t n) noexcept { size_ = std::min(size_, n); }
  void clear() noexcept {
    size_ = 0;
    if (fixed_ != nullptr) {
      heap_.reset();
      data_ = fixed_;
      capacity_ = fixed_capacity_;
    }
  }

 private:
  // Grows to hold n; a heap array it replaces goes to `old`, for the caller to free when done.
  void reserve(std::size_t n, std::unique_ptr<T[]>& old) {
    if (n <= capacity_) return;
    const std::size_t capacity = std::max({n, 2 * capacity_, std::size_t{64}});
    auto bigger = std::make_unique_for_overwrite<T[]>(capacity);
    if (size_ > 0) std::memcpy(bigger.get(), data_, size_ * sizeof(T));
    old = std::move(heap_);
    heap_ = std::move(bigger);
    data_ = heap_.get();
    capacity_ = capacity;
  }

  T* fixed_ = nullptr;
  std::size_t fixed_capacity_ = 0;
  std::unique_ptr<T[]> heap_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace batchd

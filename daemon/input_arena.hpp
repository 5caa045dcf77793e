// The memory the drain loop assembles batches in when the backend is worker processes: one memfd
// of fixed slots, one per pooled batch object (its input offsets, then its bytes). The daemon maps
// it read-write; it is sealed so that every other mapping is read-only (F_SEAL_FUTURE_WRITE: a
// worker can neither map it writable, nor write it, nor mprotect its mapping writable), and each
// worker maps it at attach. A batch in a slot is handed to a worker by position, with no copy, and
// a worker that scribbles cannot spoil the inputs a re-run elsewhere reads.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <cstddef>
#include <cstdint>

#include "base/expected.hpp"
#include "shm/fd.hpp"

namespace batchd {

class InputArena {
 public:
  struct Slot {
    std::uint32_t* offsets = nullptr;
    std::size_t offsets_capacity = 0;
    char* bytes = nullptr;
    std::size_t bytes_capacity = 0;
  };

  // slots x ((max_inputs + 1) offsets, bytes_per_slot bytes). The file is sparse: a slot's pages
  // are memory only once a batch has used them.
  static Expected<InputArena> create(std::size_t slots, std::uint32_t max_inputs, std::uint64_t bytes_per_slot);

  InputArena() = default;
  InputArena(InputArena&&) noexcept = default;
  InputArena& operator=(InputArena&&) noexcept = default;

  [[nodiscard]] std::size_t slots() const noexcept { return slots_; }
  [[nodiscard]] Slot slot(std::size_t i) const noexcept;
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] std::uint64_t size_bytes() const noexcept { return bytes_; }

  // Whether [p, p + n) lies inside the arena (n may be 0), and p's position in it.
  [[nodiscard]] bool holds(const void* p, std::size_t n) const noexcept;
  [[nodiscard]] std::uint64_t offset_of(const void* p) const noexcept {
    return static_cast<std::uint64_t>(static_cast<const char*>(p) - base_);
  }

 private:
  shm::UniqueFd fd_;
  boost::interprocess::mapped_region map_;
  char* base_ = nullptr;
  std::uint64_t bytes_ = 0;
  std::size_t slots_ = 0;
  std::size_t offsets_capacity_ = 0;
  std::uint64_t bytes_at_ = 0;     // within a slot
  std::uint64_t slot_stride_ = 0;
};

}  // namespace batchd

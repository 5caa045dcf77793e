#include "daemon/input_arena.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "shm/align.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {
namespace {

// The whole arena's size, virtual: past it the daemon refuses to start rather than map terabytes.
constexpr std::uint64_t kMaxArenaBytes = std::uint64_t{1} << 40;

}  // namespace

Expected<InputArena> InputArena::create(std::size_t slots, std::uint32_t max_inputs, std::uint64_t bytes_per_slot) {
  InputArena arena;
  arena.slots_ = slots;
  arena.offsets_capacity_ = std::size_t{max_inputs} + 1;
  arena.bytes_at_ = shm::round_up_to_page(arena.offsets_capacity_ * sizeof(std::uint32_t));
  arena.slot_stride_ = arena.bytes_at_ + shm::round_up_to_page(bytes_per_slot);
  if (slots == 0 || bytes_per_slot == 0 || arena.slot_stride_ > kMaxArenaBytes / slots) {
    return make_failure(std::errc::invalid_argument,
                        fmt::format("an input arena of {} slots of {} inputs and {} bytes is out of range", slots,
                                    max_inputs, bytes_per_slot));
  }
  arena.bytes_ = arena.slot_stride_ * slots;
  auto fd = shm::create_memfd("batchd-inputs", arena.bytes_);
  if (!fd) return fd.error();
  auto map = shm::map_fd(fd->get(), arena.bytes_, true);
  if (!map) return map.error();
  // After mapping: the daemon's mapping is the only writable one there will ever be.
  if (auto sealed = shm::seal_memfd(fd->get(), true); !sealed) return sealed.error();
  arena.fd_ = std::move(*fd);
  arena.map_ = std::move(*map);
  arena.base_ = static_cast<char*>(arena.map_.get_address());
  return arena;
}

InputArena::Slot InputArena::slot(std::size_t i) const noexcept {
  char* at = base_ + slot_stride_ * i;
  return {static_cast<std::uint32_t*>(static_cast<void*>(at)), offsets_capacity_, at + bytes_at_,
          static_cast<std::size_t>(slot_stride_ - bytes_at_)};
}

bool InputArena::holds(const void* p, std::size_t n) const noexcept {
  const auto at = reinterpret_cast<std::uintptr_t>(p);  // p may point anywhere: compare addresses
  const auto base = reinterpret_cast<std::uintptr_t>(base_);
  return base_ != nullptr && at >= base && at - base <= bytes_ && n <= bytes_ - (at - base);
}

}  // namespace batchd

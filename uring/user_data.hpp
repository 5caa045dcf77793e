// An io_uring completion carries back only its 64-bit user_data, so that one word must say what
// finished and for whom, with no lookup table and no allocation per operation: the operation in
// the top byte, the owner's id (a session, a handshake, a connection slot and generation) in the
// 56 bits below. The daemon's drain loop and the front-end's event loops both pack this way.
#pragma once

#include <cstdint>

namespace batchd::uring {

inline constexpr std::uint64_t kIdBits = 56;
inline constexpr std::uint64_t kIdMask = (std::uint64_t{1} << kIdBits) - 1;

// op must fit a byte; id must fit 56 bits (the higher bits are dropped).
template <class Op>
constexpr std::uint64_t pack(Op op, std::uint64_t id) noexcept {
  return (static_cast<std::uint64_t>(op) << kIdBits) | (id & kIdMask);
}
template <class Op>
constexpr Op op_of(std::uint64_t user_data) noexcept {
  return static_cast<Op>(user_data >> kIdBits);
}
constexpr std::uint64_t id_of(std::uint64_t user_data) noexcept { return user_data & kIdMask; }

}  // namespace batchd::uring

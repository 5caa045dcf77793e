// What each of the drain loop's io_uring operations waits for, packed into its user_data: the
// kind in the top byte, whose it is (a session or handshake id) below, so one 64-bit word routes
// a completion without a lookup table.
#pragma once

#include <cstdint>

namespace batchd::io_ops {

enum class Op : std::uint64_t {
  kListen = 1,
  kDoorbell = 2,        // the daemon's own: workers and request_stop()
  kAttach = 3,
  kSession = 4,
  kClientDoorbell = 5,
  kIgnore = 6,          // completions nobody waits for (poll removals)
};
constexpr std::uint64_t pack(Op op, std::uint64_t id) noexcept {
  return (static_cast<std::uint64_t>(op) << 56) | id;
}
constexpr Op op_of(std::uint64_t user_data) noexcept { return static_cast<Op>(user_data >> 56); }
constexpr std::uint64_t id_of(std::uint64_t user_data) noexcept {
  return user_data & ((std::uint64_t{1} << 56) - 1);
}

}  // namespace batchd::io_ops

// What each of the drain loop's io_uring operations waits for, packed into its user_data
// (uring/user_data.hpp): the kind, and whose it is (a session or handshake id).
#pragma once

#include <cstdint>

#include "uring/user_data.hpp"

namespace batchd::io_ops {

enum class Op : std::uint64_t {
  kListen = 1,
  kDoorbell = 2,        // the daemon's own: workers and request_stop()
  kAttach = 3,
  kSession = 4,
  kClientDoorbell = 5,
  kIgnore = 6,          // completions nobody waits for (poll removals)
  kWorker = 7,          // an attached worker's control connection
};
constexpr std::uint64_t pack(Op op, std::uint64_t id) noexcept { return uring::pack(op, id); }
constexpr Op op_of(std::uint64_t user_data) noexcept { return uring::op_of<Op>(user_data); }
constexpr std::uint64_t id_of(std::uint64_t user_data) noexcept { return uring::id_of(user_data); }

}  // namespace batchd::io_ops

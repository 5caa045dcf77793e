// The daemon's open-file budget: each attached client holds a few descriptors, so the soft
// RLIMIT_NOFILE (1024 by default almost everywhere) decides how many clients can attach before
// memfd_create fails. Checked at start, so an impossible --max-clients fails then, not at the
// 250th client.
#pragma once

#include <cstdint>

namespace batchd {

// Per attached client: control connection, request and completion memfds, doorbell eventfd.
inline constexpr std::uint64_t kFdsPerClient = 4;
// Besides the clients: stdio, io_uring, the listener and its lock, the status page, eventfds,
// backend threads and libraries, and connections still in the handshake.
inline constexpr std::uint64_t kFdsReserved = 64;

// Descriptors a daemon needs with this many clients and handshakes at once.
constexpr std::uint64_t fds_needed(std::uint64_t max_clients, std::uint64_t max_attaching) noexcept {
  return max_clients * kFdsPerClient + max_attaching + kFdsReserved;
}

// Raises the soft RLIMIT_NOFILE to the hard limit where it is lower (allowed without privilege;
// may be refused by a seccomp filter, which is no error) and returns the soft limit in force.
std::uint64_t raise_fd_limit() noexcept;

}  // namespace batchd

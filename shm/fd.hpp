// File descriptors: ownership, and passing them over a Unix socket (SCM_RIGHTS).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "base/expected.hpp"

namespace batchd::shm {

// Owns one file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

inline constexpr std::size_t kMaxPassedFds = 8;
// The most fds one message can carry (the kernel's SCM_MAX_FD).
inline constexpr std::size_t kMaxReceivedFds = 253;

// Sends one message with fds attached, whole (else EMSGSIZE); the errno in the failure's code
// otherwise. Retries EINTR.
Expected<void> send_with_fds(int socket, std::span<const std::byte> message,
                             std::span<const int> fds) noexcept;

// Receives one message (up to message.size() bytes) and any fds sent with it. Returns the byte
// count, 0 when the peer closed, or the errno in the failure's code. A truncated message is
// refused with EPROTO; the fds that came with any message are in `fds` all the same, for the
// caller to close (a daemon closes a peer's fds off its own threads).
// `flags`: more recvmsg flags (MSG_DONTWAIT for a socket whose blocking mode a peer controls).
Expected<std::size_t> recv_with_fds(int socket, std::span<std::byte> message,
                                    std::vector<UniqueFd>& fds, int flags = 0) noexcept;

}  // namespace batchd::shm

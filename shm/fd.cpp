#include "shm/fd.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace batchd::shm {

Expected<void> send_with_fds(int socket, std::span<const std::byte> message,
                             std::span<const int> fds) noexcept {
  if (fds.size() > kMaxPassedFds) return errno_failure("sendmsg: too many fds", EINVAL);
  iovec iov{const_cast<std::byte*>(message.data()), message.size()};
  // Room for the most fds one message can carry (SCM_MAX_FD): fds that do not fit are dropped
  // by the kernel in this thread, and the last close of a peer's fd can block (a lingering
  // socket); received, they are the caller's to close where it likes.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceivedFds)]{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n >= 0 && static_cast<std::size_t>(n) == message.size()) return {};
    if (n >= 0) return errno_failure("sendmsg: message cut short", EMSGSIZE);
    if (errno != EINTR) return errno_failure("sendmsg");
  }
}

Expected<std::size_t> recv_with_fds(int socket, std::span<std::byte> message,
                                    std::vector<UniqueFd>& fds, int flags) noexcept {
  iovec iov{message.data(), message.size()};
  // Room for the most fds one message can carry (SCM_MAX_FD): fds that do not fit are dropped
  // by the kernel in this thread, and the last close of a peer's fd can block (a lingering
  // socket); received, they are the caller's to close where it likes.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceivedFds)]{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = 0;
  for (;;) {
    n = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | flags);
    if (n >= 0) break;
    if (errno != EINTR) return errno_failure("recvmsg");
  }
  bool bad = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);  // owned even when refused, so it is closed
    }
  }
  if (bad) {
    return errno_failure("recvmsg: message or fds truncated", EPROTO);
  }
  return static_cast<std::size_t>(n);
}

}  // namespace batchd::shm

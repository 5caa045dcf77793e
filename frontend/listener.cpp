#include "frontend/listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace batchd::http {

namespace {

constexpr int kBacklog = 4096;

std::uint16_t* port_field(sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET6) return &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port;
  return &reinterpret_cast<sockaddr_in*>(&addr)->sin_port;
}

int open_one(const ListenAddress& address) {
  const int fd = ::socket(address.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  const int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0 ||
      ::bind(fd, reinterpret_cast<const sockaddr*>(&address.addr), address.length) != 0 ||
      ::listen(fd, kBacklog) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category(), "cannot listen on the --listen address");
  }
  return fd;
}

}  // namespace

std::vector<int> open_listeners(const ListenAddress& address, unsigned count, std::uint16_t* port) {
  std::vector<int> fds;
  ListenAddress bound = address;
  try {
    for (unsigned i = 0; i < count; ++i) {
      fds.push_back(open_one(bound));
      if (i == 0) {
        socklen_t length = sizeof(bound.addr);
        if (::getsockname(fds[0], reinterpret_cast<sockaddr*>(&bound.addr), &length) != 0) {
          throw std::system_error(errno, std::generic_category(), "getsockname");
        }
      }
    }
  } catch (...) {
    for (const int fd : fds) ::close(fd);
    throw;
  }
  *port = ntohs(*port_field(bound.addr));
  return fds;
}

}  // namespace batchd::http

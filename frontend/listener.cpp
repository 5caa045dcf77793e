#include "frontend/listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <stdexcept>
#include <system_error>

namespace batchd::http {

namespace {

constexpr int kBacklog = 4096;

std::uint16_t parse_port(std::string_view text, std::string_view whole) {
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || port > 65535) {
    throw std::invalid_argument("bad port in --listen " + std::string(whole));
  }
  return static_cast<std::uint16_t>(port);
}

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

ListenAddress parse_listen_address(std::string_view text) {
  ListenAddress out;
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) throw std::invalid_argument("--listen wants ADDR:PORT, got " + std::string(text));
  std::string host(text.substr(0, colon));
  const std::uint16_t port = parse_port(text.substr(colon + 1), text);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6->sin6_addr) != 1) {
      throw std::invalid_argument("bad IPv6 address in --listen " + std::string(text));
    }
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) {
    throw std::invalid_argument("bad IPv4 address in --listen " + std::string(text));
  }
  out.length = sizeof(sockaddr_in);
  return out;
}

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

// ipc-uds-server: the Unix-domain-socket reference for the IPC benchmark. One epoll loop on one
// thread (as batchd has one drain loop) answers each request message with the lowercase hex
// SHA-256 of its bytes, the same work as batchd's cpu backend at cost 1.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/ipc/uds_protocol.hpp"
#include "backend/reference_batchstring.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

int listen_on(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd < 0 || path.size() >= sizeof(addr.sun_path)) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 128) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Answers every message waiting on `fd`; false when the peer is gone.
bool serve(int fd, std::vector<char>& buffer) {
  for (;;) {
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false;
    char answer[batchd::kDigestHexBytes];
    batchd::reference_batchstring(std::string_view(buffer.data(), static_cast<std::size_t>(n)), 1,
                                           answer);
    if (::send(fd, answer, sizeof(answer), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(answer))) return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Unix-domain-socket request/response server for bench/ipc"};
  std::string path;
  app.add_option("--socket", path, "where to listen")->required();
  CLI11_PARSE(app, argc, argv);

  const int listener = listen_on(path);
  const int epoll = ::epoll_create1(EPOLL_CLOEXEC);
  if (listener < 0 || epoll < 0) {
    std::perror("ipc-uds-server: listen");
    return 1;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  epoll_event ev{EPOLLIN, {.fd = listener}};
  ::epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev);
  std::vector<char> buffer(batchd::bench::kUdsMaxMessage);
  std::array<epoll_event, 64> ready{};
  while (g_stop == 0) {
    const int n = ::epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), 200);
    for (int i = 0; i < n; ++i) {
      const int fd = ready[static_cast<std::size_t>(i)].data.fd;
      if (fd == listener) {
        const int conn = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        epoll_event cev{EPOLLIN, {.fd = conn}};
        ::epoll_ctl(epoll, EPOLL_CTL_ADD, conn, &cev);
      } else if (!serve(fd, buffer)) {
        ::epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
        ::close(fd);
      }
    }
  }
  ::unlink(path.c_str());
  return 0;
}

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "bench/ipc/channel.hpp"
#include "bench/ipc/uds_protocol.hpp"

namespace batchd::bench {
namespace {

class UdsChannel final : public Channel {
 public:
  explicit UdsChannel(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (fd_ < 0 || path.size() >= sizeof(addr.sun_path)) throw std::runtime_error("uds: bad socket");
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("uds: connect " + path + ": " + why);
    }
  }
  ~UdsChannel() override { ::close(fd_); }
  UdsChannel(const UdsChannel&) = delete;
  UdsChannel& operator=(const UdsChannel&) = delete;

  bool call(std::string_view input, std::string& output, std::string& error) override {
    if (::send(fd_, input.data(), input.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(input.size())) {
      error = std::string("send: ") + std::strerror(errno);
      return false;
    }
    output.resize(kUdsMaxMessage);
    const ssize_t n = ::recv(fd_, output.data(), output.size(), 0);
    if (n <= 0) {
      error = n == 0 ? "server closed the connection" : std::string("recv: ") + std::strerror(errno);
      return false;
    }
    output.resize(static_cast<std::size_t>(n));
    return true;
  }

 private:
  int fd_ = -1;
};

}  // namespace

ChannelFactory uds_channels(const std::string& socket_path) {
  return [socket_path] { return std::make_unique<UdsChannel>(socket_path); };
}

}  // namespace batchd::bench

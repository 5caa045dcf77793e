// "ADDR:PORT" as a socket address (batchd-http's --listen and the daemon's --metrics-listen), and
// the port file a front-end listening on port 0 writes (--port-file).
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"

namespace batchd {

struct ListenAddress {
  sockaddr_storage addr{};
  socklen_t length = 0;
};

// "ADDR:PORT" with an IPv4 address, or "[ADDR]:PORT" with an IPv6 one; port 0 asks the kernel for
// a free one. A failure's message names `flag` and the text.
[[nodiscard]] Expected<ListenAddress> parse_listen_address(std::string_view text, std::string_view flag);

// Writes `port` to `path`, whole and renamed into place, so a reader never sees half a number.
// Throws std::runtime_error when it cannot.
void write_port_file(const std::string& path, std::uint16_t port);

}  // namespace batchd

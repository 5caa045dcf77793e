// "ADDR:PORT" as a socket address: batchd-http's --listen and the daemon's --metrics-listen.
#pragma once

#include <sys/socket.h>

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

}  // namespace batchd

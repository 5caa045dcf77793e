// The listening sockets: one per event loop on the same address, joined by SO_REUSEPORT so the
// kernel spreads new connections over the loops without a shared accept queue.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/listen_address.hpp"

namespace batchd::http {

using batchd::ListenAddress;

// Opens `count` listening sockets; with port 0 the first picks a free port and the others join
// it. Stores the bound port in *port. Throws std::system_error; on failure nothing stays open.
std::vector<int> open_listeners(const ListenAddress& address, unsigned count, std::uint16_t* port);

}  // namespace batchd::http

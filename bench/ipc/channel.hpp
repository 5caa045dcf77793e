// One request/response channel per client thread, whatever carries it: the IPC benchmark times
// the same loop over batchd, a Unix-domain socket server and iceoryx.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "client_lib/client.hpp"

namespace batchd::bench {

class Channel {
 public:
  virtual ~Channel() = default;
  // One round trip: sends `input`, waits for its answer. False with `error` set on failure.
  virtual bool call(std::string_view input, std::string& output, std::string& error) = 0;
};

// Makes one channel for each client thread; may throw with a message when the server is missing.
using ChannelFactory = std::function<std::unique_ptr<Channel>()>;

// batchd over shared memory: every thread submits through one shared batchd::Client, as an
// application would.
ChannelFactory batchd_channels(const std::string& socket_path, const ClientOptions& options);
// A SOCK_SEQPACKET connection per thread to ipc-uds-server.
ChannelFactory uds_channels(const std::string& socket_path);
// An iceoryx request/response client per thread, to ipc-iox-server; waits for the answer on a
// WaitSet, or spins on it when busy_poll.
ChannelFactory iceoryx_channels(bool busy_poll);

}  // namespace batchd::bench

// Built when iceoryx is not installed: the benchmark then says so instead of measuring it.
#include <stdexcept>

#include "bench/ipc/channel.hpp"

namespace batchd::bench {

ChannelFactory iceoryx_channels(bool /*busy_poll*/) {
  throw std::runtime_error("this build has no iceoryx: install libiceoryx-posh-dev and reconfigure");
}

}  // namespace batchd::bench

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "bench/ipc/channel.hpp"
#include "bench/ipc/iox_types.hpp"
#include "iceoryx_posh/popo/client.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"

namespace batchd::bench {
namespace {

using IoxClient = iox::popo::Client<IoxRequest, IoxResponse>;

class IoxChannel final : public Channel {
 public:
  explicit IoxChannel(bool busy_poll)
      : busy_poll_(busy_poll),
        client_({iox::capro::IdString_t(kIoxService),
                 iox::capro::IdString_t(kIoxInstance),
                 iox::capro::IdString_t(kIoxEvent)}) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (client_.getConnectionState() != iox::ConnectionState::CONNECTED) {
      if (std::chrono::steady_clock::now() > give_up) {
        throw std::runtime_error("iceoryx: no server offers the benchmark service (is ipc-iox-server up?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!busy_poll_) {
      waitset_.attachState(client_, iox::popo::ClientState::HAS_RESPONSE).or_else([](auto) {
        throw std::runtime_error("iceoryx: cannot attach the client to a WaitSet");
      });
    }
  }
  ~IoxChannel() override {
    if (!busy_poll_) waitset_.detachState(client_, iox::popo::ClientState::HAS_RESPONSE);
  }
  IoxChannel(const IoxChannel&) = delete;
  IoxChannel& operator=(const IoxChannel&) = delete;

  bool call(std::string_view input, std::string& output, std::string& error) override {
    if (input.size() > sizeof(IoxRequest::bytes)) {
      error = "input larger than the iceoryx request";
      return false;
    }
    bool sent = false;
    client_.loan().and_then([&](auto& request) {
      request->length = static_cast<std::uint32_t>(input.size());
      std::memcpy(request->bytes, input.data(), input.size());
      request.getRequestHeader().setSequenceId(++sequence_);
      request.send().and_then([&] { sent = true; });
    });
    if (!sent) {
      error = "iceoryx: could not loan or send a request";
      return false;
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      bool answered = false;
      while (!answered && !client_.take().and_then([&](const auto& response) {
        if (response.getResponseHeader().getSequenceId() != sequence_) return;  // a stale answer
        output.assign(response->answer, sizeof(response->answer));
        answered = true;
      }).has_error()) {
      }
      if (answered) return true;
      if (std::chrono::steady_clock::now() > give_up) {
        error = "iceoryx: no answer within 5 s (is ipc-iox-server still up?)";
        return false;
      }
      if (!busy_poll_) waitset_.timedWait(iox::units::Duration::fromMilliseconds(100));
    }
  }

 private:
  bool busy_poll_;
  IoxClient client_;
  iox::popo::WaitSet<> waitset_;
  std::int64_t sequence_ = 0;
};

}  // namespace

ChannelFactory iceoryx_channels(bool busy_poll) {
  iox::runtime::PoshRuntime::initRuntime("batchd-ipc-bench");
  return [busy_poll] { return std::make_unique<IoxChannel>(busy_poll); };
}

}  // namespace batchd::bench

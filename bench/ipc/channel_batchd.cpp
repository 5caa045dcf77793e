#include <chrono>
#include <stdexcept>

#include "bench/ipc/channel.hpp"
#include "client_lib/client.hpp"

namespace batchd::bench {
namespace {

class BatchdChannel final : public Channel {
 public:
  explicit BatchdChannel(std::shared_ptr<Client> client) : client_(std::move(client)) {}

  bool call(std::string_view input, std::string& output, std::string& error) override {
    Result result = client_->submit(input, std::chrono::seconds(5));
    if (!result.ok()) {
      error = result.error().message;
      return false;
    }
    output.swap(result.output());
    return true;
  }

 private:
  std::shared_ptr<Client> client_;
};

}  // namespace

ChannelFactory batchd_channels(const std::string& socket_path, const ClientOptions& given) {
  ClientOptions options = given;
  options.socket_path = socket_path;
  Error error;
  std::shared_ptr<Client> client = Client::connect(options, &error);
  if (!client) throw std::runtime_error("batchd: " + error.message);
  return [client] { return std::make_unique<BatchdChannel>(client); };
}

}  // namespace batchd::bench

// control_model: model control on the daemon's control socket (shm/model_control.hpp). The
// daemon answers once the load or unload is done, with its account of it.
#include <cstring>

#include "client_lib/attach.hpp"
#include "client_lib/client.hpp"

namespace batchd {

std::optional<std::string> control_model(const ClientOptions& options, const std::string& model, ModelAction action,
                                         std::chrono::milliseconds timeout, Error* error) {
  Error local;
  Error& err = error != nullptr ? *error : local;
  shm::ModelControlHello hello{};
  if (model.empty() || model.size() >= sizeof(hello.model)) {
    err = {ErrorCode::kUnknownModel,
           "a model name is 1 to " + std::to_string(sizeof(hello.model) - 1) + " bytes; got " +
               std::to_string(model.size())};
    return std::nullopt;
  }
  hello.hello = {shm::kAttachMagic, shm::kProtocolVersion, shm::kHelloModelControl, 0};
  hello.action = action == ModelAction::kLoad ? shm::ModelAction::kLoad : shm::ModelAction::kUnload;
  std::memcpy(hello.model, model.data(), model.size());
  const std::string path = options.socket_path.empty() ? client_default_socket_path() : options.socket_path;
  client_detail::Attempt<Attachment> answer = control_model_on_daemon(path, timeout, hello);
  if (!answer) {
    err = answer.error();
    return std::nullopt;
  }
  return std::move(answer->message);
}

}  // namespace batchd

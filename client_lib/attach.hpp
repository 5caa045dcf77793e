// The client's side of the attach handshake: connect to the daemon's control socket (retrying
// until a deadline while no daemon is there), say hello, receive the segment's fds.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "client_lib/attempt.hpp"
#include "client_lib/client.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/fd.hpp"
#include "shm/model_control.hpp"
#include "shm/worker_region.hpp"

namespace batchd {

struct Attachment {
  shm::UniqueFd connection;
  std::vector<shm::UniqueFd> fds;  // shm::AttachFd order
  std::uint32_t client_id = 0;
  std::string message;  // what the daemon said with its reply (model control's account)
};

// The attachment, or why there is none: no daemon could be reached in time, or it refused (the
// refusal's reason as a typed error: permission_denied, too_many_clients, ...).
// With `flags` (shm::Hello::flags) other than 0 it asks the daemon a question instead, and the
// Attachment holds the answer's one fd.
client_detail::Attempt<Attachment> attach_to_daemon(const std::string& socket_path,
                                                    std::chrono::milliseconds timeout,
                                                    std::uint32_t flags = 0);

// A model-control request (shm/model_control.hpp): the Attachment holds no fd, and the
// daemon's account in `message`.
client_detail::Attempt<Attachment> control_model_on_daemon(const std::string& socket_path,
                                                           std::chrono::milliseconds timeout,
                                                           const shm::ModelControlHello& hello);

// The same handshake in the worker role (shm/worker_region.hpp): the Attachment holds the
// worker region's one fd.
client_detail::Attempt<Attachment> attach_worker_to_daemon(const std::string& socket_path,
                                                           std::chrono::milliseconds timeout,
                                                           const shm::WorkerHello& hello);
// The socket path a client uses when none is given: as the daemon's default.
std::string client_default_socket_path();

}  // namespace batchd

#include "daemon/parked_connections.hpp"

#include <utility>

namespace batchd {

void ParkedConnections::release(shm::UniqueFd connection, std::uint64_t armed_poll) {
  if (!connection.valid()) return;
  if (close_at_once_) {
    // Wherever io_uring drops its last reference, the close cannot block either.
    connection.reset();
    return;
  }
  if (armed_poll != 0) {
    by_poll_.emplace(armed_poll, std::move(connection));
  } else {
    reaper_.drop(std::move(connection));
  }
}

bool ParkedConnections::poll_completed(std::uint64_t user_data) {
  auto it = by_poll_.find(user_data);
  if (it == by_poll_.end()) return false;
  reaper_.drop(std::move(it->second));
  by_poll_.erase(it);
  return true;
}

void ParkedConnections::release_all() {
  for (auto& [user_data, fd] : by_poll_) reaper_.drop(std::move(fd));
  by_poll_.clear();
}

}  // namespace batchd

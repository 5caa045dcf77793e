// The daemon's control socket: a SOCK_SEQPACKET listener at a path, held by one daemon at a
// time through a Boost.Interprocess file_lock beside it, and the peer check on each connection.
#pragma once

#include <sys/types.h>

#include <boost/interprocess/sync/file_lock.hpp>
#include <optional>
#include <string>
#include <vector>

#include "shm/fd.hpp"

namespace batchd {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class ControlSocket {
 public:
  // Takes the lock (throws std::runtime_error naming the holder's path if another daemon has
  // it), removes a stale socket file, binds and listens (non-blocking). With `refuse_fds`, asks
  // the kernel to refuse descriptors sent to any connection (SO_PASSRIGHTS, Linux 6.16 and
  // later: the sender's sendmsg fails with EPERM); refuses_fds() says whether it could.
  ControlSocket(std::string path, bool refuse_fds);
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  [[nodiscard]] int fd() const noexcept { return listener_.get(); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] bool refuses_fds() const noexcept { return refuses_fds_; }

  // Accepts one pending connection (non-blocking, close-on-exec) with its peer's credentials;
  // nothing when none is pending.
  std::optional<std::pair<shm::UniqueFd, PeerCredentials>> accept_one() noexcept;

  // Stops listening and removes the socket file (the lock stays until destruction).
  void close_listener() noexcept;

 private:
  std::string path_;
  std::string lock_path_;
  boost::interprocess::file_lock lock_;
  shm::UniqueFd listener_;
  bool refuses_fds_ = false;
};

// Same uid as the daemon, or a uid or gid on the allow lists.
bool peer_allowed(const PeerCredentials& peer, const std::vector<uid_t>& uids,
                  const std::vector<gid_t>& gids) noexcept;

}  // namespace batchd

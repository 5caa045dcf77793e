#include "daemon/control_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "daemon/config.hpp"

namespace batchd {
namespace {

boost::interprocess::file_lock take_lock(const std::string& lock_path) {
  // file_lock needs an existing file; creating it is harmless if another daemon already did. The
  // fd is closed before locking: closing any fd of a file drops this process's fcntl locks on it.
  {
    shm::UniqueFd touch(::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
    if (!touch.valid()) {
      throw std::system_error(errno, std::generic_category(), "cannot create lock file " + lock_path);
    }
  }
  boost::interprocess::file_lock lock(lock_path.c_str());
  if (!lock.try_lock()) {
    throw std::runtime_error("another batchd already serves this socket (lock " + lock_path +
                             " is held)");
  }
  return lock;
}

}  // namespace

std::string default_socket_path() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (::geteuid() == 0 || runtime == nullptr || *runtime == '\0') return "/run/batchd/batchd.sock";
  return std::string(runtime) + "/batchd/batchd.sock";
}

namespace {

// SO_PASSRIGHTS from Linux 6.16's <asm-generic/socket.h>; Debian 12's headers predate it.
constexpr int kSoPassRights = 83;

}  // namespace

ControlSocket::ControlSocket(std::string path, bool refuse_fds) : path_(std::move(path)) {
  sockaddr_un addr{};
  if (path_.empty() || path_.size() >= sizeof(addr.sun_path)) {
    throw std::runtime_error("socket path '" + path_ + "' is empty or longer than " +
                             std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  const auto dir = std::filesystem::path(path_).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  lock_path_ = path_ + ".lock";
  lock_ = take_lock(lock_path_);
  ::unlink(path_.c_str());  // stale: its daemon is gone, since we hold the lock
  listener_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener_.valid()) throw std::system_error(errno, std::generic_category(), "socket");
  // Accepted connections inherit it: no peer can queue a descriptor on them at all. Older
  // kernels say ENOPROTOOPT, and the daemon receives what comes and closes it on its reaper.
  const int off = 0;
  refuses_fds_ = refuse_fds &&
                 ::setsockopt(listener_.get(), SOL_SOCKET, kSoPassRights, &off, sizeof(off)) == 0;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::system_error(errno, std::generic_category(), "bind " + path_);
  }
  // Who may attach is decided per connection from its credentials, not by file mode.
  ::chmod(path_.c_str(), 0666);
  if (::listen(listener_.get(), 128) != 0) {
    throw std::system_error(errno, std::generic_category(), "listen " + path_);
  }
}

ControlSocket::~ControlSocket() { close_listener(); }

void ControlSocket::close_listener() noexcept {
  if (!listener_.valid()) return;
  listener_.reset();
  ::unlink(path_.c_str());
}

std::optional<std::pair<shm::UniqueFd, PeerCredentials>> ControlSocket::accept_one() noexcept {
  if (!listener_.valid()) return std::nullopt;
  shm::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!conn.valid()) return std::nullopt;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return std::make_pair(std::move(conn), PeerCredentials{cred.pid, cred.uid, cred.gid});
}

bool peer_allowed(const PeerCredentials& peer, const std::vector<uid_t>& uids,
                  const std::vector<gid_t>& gids) noexcept {
  if (peer.uid == ::geteuid()) return true;
  if (std::find(uids.begin(), uids.end(), peer.uid) != uids.end()) return true;
  return std::find(gids.begin(), gids.end(), peer.gid) != gids.end();
}

}  // namespace batchd

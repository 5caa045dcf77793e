// Where the drain loop puts a peer's connection it is done with. No descriptor a peer could make a
// close of block is closed on the drain thread: a connection goes to the reaper, and one that an
// io_uring poll still references is parked until that poll's completion, so the reaper's close is
// the last one. Drain thread only.
#pragma once

#include <cstdint>
#include <unordered_map>

#include "daemon/fd_reaper.hpp"
#include "shm/fd.hpp"

namespace batchd {

class ParkedConnections {
 public:
  explicit ParkedConnections(FdReaper& reaper) : reaper_(reaper) {}

  // The kernel refuses descriptors on the control socket's connections (ControlSocket::refuses_fds):
  // no peer could queue one, and a Unix socket does not linger, so their close cannot block and
  // costs no hand-off to the reaper.
  void set_close_at_once(bool at_once) noexcept { close_at_once_ = at_once; }

  // Done with `connection`; `armed_poll`: the user_data of the io_uring poll that still
  // references it (0: none).
  void release(shm::UniqueFd connection, std::uint64_t armed_poll);
  // A poll's completion: true when it was a parked connection's, which now goes to the reaper.
  bool poll_completed(std::uint64_t user_data);
  // Once the io_uring is closed (its polls are gone with it): every parked connection to the reaper.
  void release_all();

 private:
  FdReaper& reaper_;
  bool close_at_once_ = false;
  std::unordered_map<std::uint64_t, shm::UniqueFd> by_poll_;
};

}  // namespace batchd

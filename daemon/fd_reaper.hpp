// Closes descriptors a peer can make a close of block: a socket it set to linger with unsent
// data, a file on a FUSE mount whose flush never returns, or a connection with such descriptors
// still queued on it (its last close releases them). The drain thread and the lane workers hand
// those here instead of closing them, so a peer's descriptor can stall only a reaper thread.
#pragma once

#include <cstddef>
#include <memory>

#include "shm/fd.hpp"

namespace batchd {

class FdReaper {
 public:
  // Threads that close at once; a close that blocks holds one, and another starts while fewer
  // than this are stuck. Past it, descriptors wait their turn (bounded by the open-file limit).
  static constexpr unsigned kMaxThreads = 4;

  FdReaper();
  // Waits briefly for what is queued to close; a thread still stuck in a peer's close is left
  // to the process's exit (it owns what it touches), so stopping never waits on a peer.
  ~FdReaper();
  FdReaper(const FdReaper&) = delete;
  FdReaper& operator=(const FdReaper&) = delete;

  // Any thread: closes `fd` on a reaper thread. Never blocks on a peer; takes a lock that no
  // thread holds across a close. A socket whose close could linger is first told not to.
  void drop(shm::UniqueFd fd) noexcept;

  // Descriptors handed over and not yet closed (tests and status).
  [[nodiscard]] std::size_t pending() const noexcept;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Drains the messages queued on a connection the daemon is done with, taking the descriptors
// they carry (so their last close happens here, each socket among them set not to linger);
// at most `max_messages`, none of them waited for. Reaper threads only.
void discard_queued_fds(int connection, unsigned max_messages) noexcept;

}  // namespace batchd

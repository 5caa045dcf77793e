// The connections in the attach handshake: accepted, their hello not read yet. Ordered by id,
// which is accept order and so deadline order (the first expires first), counted per uid (the
// handshake's per-user bound and who gives way when the table is full), with the hellos the
// drain loop's budget left for a later pass. Drain thread only.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>

#include "daemon/control_socket.hpp"
#include "shm/fd.hpp"

namespace batchd {

struct PendingAttach {
  shm::UniqueFd connection;
  PeerCredentials peer;
  std::int64_t deadline_ns = 0;  // refused (and closed) if no hello came by then
  bool polled = false;           // an io_uring poll on the connection is armed
};

class PendingAttaches {
 public:
  [[nodiscard]] bool empty() const noexcept { return by_id_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return by_id_.size(); }
  [[nodiscard]] unsigned of_uid(uid_t uid) const noexcept;
  void add(std::uint64_t id, PendingAttach pending);
  // nullptr when none has that id (its handshake ended).
  [[nodiscard]] PendingAttach* find(std::uint64_t id) noexcept;
  // Ends the handshake's entry and returns it; one with that id must be there (find).
  PendingAttach take(std::uint64_t id);
  // The oldest handshake, of any uid or of one (0: none).
  [[nodiscard]] std::uint64_t oldest() const noexcept { return by_id_.empty() ? 0 : by_id_.begin()->first; }
  [[nodiscard]] std::uint64_t oldest_of(uid_t uid) const noexcept;
  // The first deadline (0: none waiting).
  [[nodiscard]] std::int64_t next_deadline_ns() const noexcept {
    return by_id_.empty() ? 0 : by_id_.begin()->second.deadline_ns;
  }
  // Of the uids with handshakes open, the one to give way for a newcomer (HandshakeLimiter's
  // rule).
  [[nodiscard]] uid_t heaviest(uid_t newcomer) const noexcept;

  // A hello to read in a later pass (its deadline still holds), and the next of those.
  void defer_hello(std::uint64_t id) { hellos_due_.push_back(id); }
  [[nodiscard]] bool hellos_due() const noexcept { return !hellos_due_.empty(); }
  std::uint64_t next_due_hello();

  // At the end: hands each connection still in its handshake to `release`.
  template <class Release>
  void release_all(Release&& release) {
    for (auto& [id, pending] : by_id_) release(std::move(pending.connection));
    by_id_.clear();
    per_uid_.clear();
    hellos_due_.clear();
  }

 private:
  std::map<std::uint64_t, PendingAttach> by_id_;
  std::unordered_map<uid_t, unsigned> per_uid_;
  std::deque<std::uint64_t> hellos_due_;
};

}  // namespace batchd

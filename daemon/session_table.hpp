// The attached clients: by id, counted per uid (for --max-clients-per-uid), and in the
// round-robin order the drain loop takes their rings in. Drain thread only.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "daemon/client_session.hpp"

namespace batchd {

class SessionTable {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return by_id_.size(); }
  [[nodiscard]] bool empty() const noexcept { return by_id_.empty(); }
  // Sessions of that uid now.
  [[nodiscard]] unsigned of_uid(uid_t uid) const noexcept;
  void add(std::shared_ptr<ClientSession> session);
  // nullptr when none has that id (it was dropped).
  [[nodiscard]] ClientSession* find(std::uint64_t id) const noexcept;
  // Removes the session from the table and the drain order; nullptr when none has that id.
  std::shared_ptr<ClientSession> take(std::uint64_t id);
  // Any session's id (for dropping them all); the table must not be empty.
  [[nodiscard]] std::uint64_t any_id() const noexcept { return by_id_.begin()->first; }
  // The session whose ring the drain loop takes next, in turn; the table must not be empty.
  std::shared_ptr<ClientSession> next_in_turn() noexcept;
  // Some session's ring holds a request not taken yet.
  [[nodiscard]] bool any_pending() const;
  template <class F>
  void for_each(F&& f) const {
    for (const auto& session : order_) f(*session);
  }

 private:
  std::unordered_map<std::uint64_t, std::shared_ptr<ClientSession>> by_id_;
  std::unordered_map<uid_t, unsigned> per_uid_;
  std::vector<std::shared_ptr<ClientSession>> order_;
  std::size_t cursor_ = 0;
};

}  // namespace batchd

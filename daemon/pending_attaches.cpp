#include "daemon/pending_attaches.hpp"

#include <algorithm>
#include <utility>

#include "daemon/handshake_limiter.hpp"

namespace batchd {

unsigned PendingAttaches::of_uid(uid_t uid) const noexcept {
  const auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

void PendingAttaches::add(std::uint64_t id, PendingAttach pending) {
  ++per_uid_[pending.peer.uid];
  by_id_.emplace(id, std::move(pending));
}

PendingAttach* PendingAttaches::find(std::uint64_t id) noexcept {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

PendingAttach PendingAttaches::take(std::uint64_t id) {
  const auto it = by_id_.find(id);
  PendingAttach pending = std::move(it->second);
  by_id_.erase(it);
  if (auto of = per_uid_.find(pending.peer.uid); of != per_uid_.end() && --of->second == 0) per_uid_.erase(of);
  return pending;
}

std::uint64_t PendingAttaches::oldest_of(uid_t uid) const noexcept {
  const auto it = std::find_if(by_id_.begin(), by_id_.end(), [&](const auto& entry) { return entry.second.peer.uid == uid; });
  return it == by_id_.end() ? 0 : it->first;
}

uid_t PendingAttaches::heaviest(uid_t newcomer) const noexcept { return HandshakeLimiter::heaviest(per_uid_, newcomer); }

std::uint64_t PendingAttaches::next_due_hello() {
  const std::uint64_t id = hellos_due_.front();
  hellos_due_.pop_front();
  return id;
}

}  // namespace batchd

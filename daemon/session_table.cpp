#include "daemon/session_table.hpp"

#include <algorithm>

namespace batchd {

unsigned SessionTable::of_uid(uid_t uid) const noexcept {
  const auto it = per_uid_.find(uid);
  return it == per_uid_.end() ? 0 : it->second;
}

void SessionTable::add(std::shared_ptr<ClientSession> session) {
  ++per_uid_[session->uid()];
  by_id_.emplace(session->id(), session);
  order_.push_back(std::move(session));
}

ClientSession* SessionTable::find(std::uint64_t id) const noexcept {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second.get();
}

std::shared_ptr<ClientSession> SessionTable::take(std::uint64_t id) {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  std::shared_ptr<ClientSession> session = std::move(it->second);
  by_id_.erase(it);
  if (auto of = per_uid_.find(session->uid()); of != per_uid_.end() && --of->second == 0) per_uid_.erase(of);
  order_.erase(std::remove(order_.begin(), order_.end(), session), order_.end());
  return session;
}

std::shared_ptr<ClientSession> SessionTable::next_in_turn() noexcept {
  if (cursor_ >= order_.size()) cursor_ = 0;
  return order_[cursor_++];
}

bool SessionTable::any_pending() const {
  return std::any_of(order_.begin(), order_.end(), [](const auto& s) { return s->has_pending(); });
}

}  // namespace batchd

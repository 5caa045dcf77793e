// Deficit round-robin over the members of a queue, on what their requests cost: each turn credits
// a member kRoundQuantumBytes, and it is served while its credit covers its next request. A member
// whose queue empties leaves the round and its credit (credit is for waiting work, not saved up
// while idle). Nests: a member may itself be a DeficitRound (tenants, then their clients).
// Member: empty(), front(), pop_front(), push_back(PendingRequest), forget(session id) returning
// the requests dropped, and idle(): done with, to be erased. Drain thread only; members stay while
// they are not idle, so steady state allocates nothing.
#pragma once

#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <utility>

#include "daemon/pending_request.hpp"

namespace batchd {

// What one turn lets a member's requests cost. Larger than any one small request's cost, so small
// requests go several to a turn; a request of the largest inputs waits a few turns.
inline constexpr std::uint64_t kRoundQuantumBytes = 16 * 1024;

template <class Key, class Member, class KeyOf>
class DeficitRound {
 public:
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  // No member is left: every one that had requests was forgotten.
  [[nodiscard]] bool idle() const noexcept { return members_.empty(); }

  // Precondition: !empty(). The next request in deficit round-robin order; the same one until
  // pop_front().
  [[nodiscard]] PendingRequest& front() noexcept {
    settle();
    return round_.front()->queue.front();
  }

  // Removes front(), charging its cost to its member; the member keeps its turn while its credit
  // lasts.
  void pop_front() noexcept {
    Member_* member = round_.front();
    const std::uint64_t cost = request_cost(member->queue.front());
    member->credit = member->credit > cost ? member->credit - cost : 0;
    member->queue.pop_front();
    --size_;
    if (member->queue.empty()) {
      round_.pop_front();
      leave(*member);
    }
  }

  void push_back(PendingRequest request) {
    // Most pushes are the last one's member again (one busy client): no hash for them.
    const Key key = KeyOf{}(request);
    if (last_ == nullptr || last_key_ != key) {
      last_ = &members_[key];  // node-based: the address is stable until forget() erases it
      last_key_ = key;
    }
    Member_& member = *last_;
    member.queue.push_back(std::move(request));
    ++size_;
    if (!member.in_round) {
      member.in_round = true;
      round_.push_back(&member);
    }
  }

  // A client that has gone: its waiting requests are dropped unanswered (nobody reads them), and
  // members left with nothing to do are erased. Returns how many requests were dropped.
  std::size_t forget(std::uint64_t session_id) {
    std::size_t dropped = 0;
    last_ = nullptr;
    for (auto it = members_.begin(); it != members_.end();) {
      Member_& member = it->second;
      dropped += member.queue.forget(session_id);
      if (member.queue.empty() && member.in_round) drop_from_round(member);
      it = member.queue.idle() ? members_.erase(it) : std::next(it);
    }
    size_ -= dropped;
    return dropped;
  }

 private:
  struct Member_ {
    Member queue;
    bool in_round = false;     // listed in round_
    bool credited = false;     // got this turn's quantum
    std::uint64_t credit = 0;  // bytes of work it may still be served this turn
  };

  static void leave(Member_& member) noexcept {
    member.in_round = false;
    member.credit = 0;
    member.credited = false;
  }

  void drop_from_round(Member_& gone) {
    Fifo<Member_*> kept;
    while (!round_.empty()) {
      if (round_.front() != &gone) kept.push_back(round_.front());
      round_.pop_front();
    }
    round_ = std::move(kept);
    leave(gone);
  }

  // Brings to the front of the round a member whose credit covers its next request. Ends: every
  // turn adds a quantum, so the front member's credit grows until it does.
  void settle() noexcept {
    for (;;) {
      Member_* member = round_.front();
      if (member->credited && member->credit >= request_cost(member->queue.front())) return;
      if (!member->credited) {
        member->credit += kRoundQuantumBytes;
        member->credited = true;
        continue;
      }
      member->credited = false;  // its turn is over: to the back, keeping what credit is left
      round_.pop_front();
      round_.push_back(member);  // cannot allocate: the round never holds more than its capacity
    }
  }

  std::unordered_map<Key, Member_> members_;
  Member_* last_ = nullptr;  // push_back's last member, and its key
  Key last_key_{};
  Fifo<Member_*> round_;  // members with waiting requests, next to serve first
  std::size_t size_ = 0;
};

}  // namespace batchd

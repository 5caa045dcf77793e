// Identical requests in flight run once (a pure model's, docs/CACHE.md): the first request for
// an input to join a batch leads, and those for the same input that come while it is queued or
// running follow it and get its answer. Each keeps its own deadline and class: a leader's run is
// not given up (expire_ns) while a follower still waits for it, and a request of a more urgent
// class than the input's leaders leads too, at its class, so whichever leader finishes first
// answers every follower. Entries, their inputs' copies and their follower lists are reused, so a
// warm coalescer allocates nothing. The drain thread joins; the completer's threads settle.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/batch.hpp"

namespace batchd {

class Coalescer {
 public:
  // The request is about to join a batch: returns true, having taken `request`, when it follows a
  // leader of the same input; else it leads (its lead token is set) and runs. `hash`: any hash of
  // the input (the response cache's, when the model has one). Drain thread.
  bool follow_or_lead(std::uint64_t hash, std::string_view input, RequestRef& request);
  // A leader (lead token `token`) was answered with `status`: a success or the input's own failure
  // answers every follower alike; any other outcome (a deadline, no device) only when no other
  // leader is left. Appends the followers to answer with the same to `out`. Any thread.
  void settle(std::uint64_t token, shm::WireStatus status, std::vector<RequestRef>& out);
  // When a leader's run may be given up: the latest deadline of everyone waiting for it (0: one
  // waits without a deadline; -1: the token is settled). Any thread.
  [[nodiscard]] std::int64_t expire_ns(std::uint64_t token) const;

 private:
  struct Entry {
    std::uint64_t hash = 0;
    std::uint32_t generation = 1;  // of its current use: a token names one use
    bool live = false;
    std::string input;
    std::int64_t latest_deadline_ns = 0;  // of its leaders and followers (0: one has none)
    std::size_t best_rank = 0;            // the most urgent class of its leaders (rank_of)
    unsigned leaders = 0;
    std::vector<RequestRef> followers;
  };
  static constexpr std::uint32_t kEmpty = 0;  // in table_: no entry (else its index + 1)

  // The live entry at token, or nullptr. Holds mu_.
  [[nodiscard]] Entry* entry_of(std::uint64_t token) noexcept;
  [[nodiscard]] const Entry* entry_of(std::uint64_t token) const noexcept;
  // Linear probing over table_, a power of two at least twice the live entries. Hold mu_.
  [[nodiscard]] std::size_t home(std::uint64_t hash) const noexcept { return hash & (table_.size() - 1); }
  void place(std::uint32_t index);
  void unplace(std::uint32_t index) noexcept;
  void grow();

  mutable std::mutex mu_;
  std::vector<Entry> entries_;         // grows, never shrinks
  std::vector<std::uint32_t> free_;    // indices of entries not in use
  std::vector<std::uint32_t> table_;   // by hash: kEmpty or an entry's index + 1
  std::size_t live_ = 0;
};

}  // namespace batchd

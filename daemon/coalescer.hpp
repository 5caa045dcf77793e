// Identical requests in flight run once (a pure model's, docs/CACHE.md): the first request for
// an input to join a batch leads, and those for the same input that come while it is queued or
// running follow it and get its answer. Each keeps its own deadline and class: a leader's run is
// not given up (expire_ns) while a follower still waits for it, and a request of a more urgent
// class than the input's leaders leads too, at its class, so whichever leader finishes first
// answers every follower. The drain thread joins; the completer's threads settle.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/batch.hpp"

namespace batchd {

class Coalescer {
 public:
  // The request is about to join a batch: returns true, having taken `request`, when it follows a
  // leader of the same input; else it leads (its lead token is set) and runs. Drain thread.
  bool follow_or_lead(std::string_view input, RequestRef& request);
  // A leader (lead token `token`) was answered with `status`: a success or the input's own failure
  // answers every follower alike; any other outcome (a deadline, no device) only when no other
  // leader is left. Appends the followers to answer with the same to `out`. Any thread.
  void settle(std::uint64_t token, shm::WireStatus status, std::vector<RequestRef>& out);
  // When a leader's run may be given up: the latest deadline of everyone waiting for it (0: one
  // waits without a deadline). Any thread.
  [[nodiscard]] std::int64_t expire_ns(std::uint64_t token) const;

 private:
  struct Entry {
    std::uint64_t token = 0;
    std::int64_t latest_deadline_ns = 0;  // of its leaders and followers (0: one has none)
    std::size_t best_rank = 0;            // the most urgent class of its leaders (rank_of)
    unsigned leaders = 0;
    std::vector<RequestRef> followers;
  };
  // Transparent, so a lookup by the batch's string_view does not copy the input.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> by_input_;
  std::unordered_map<std::uint64_t, std::string> input_of_;  // by token
  std::uint64_t next_token_ = 1;
};

}  // namespace batchd

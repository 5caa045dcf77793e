// The consumer's side of the jobs streams (docs/JOBS.md): one hiredis connection, used by the
// jobs consumer's thread alone, under a connect and a command timeout, so a stuck Redis costs
// that thread a bounded wait and no event loop anything. Every call says whether Redis answered;
// after a failure the connection is dropped and made again, after a growing pause, by ready().
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "frontend/jobs_entry.hpp"
#include "frontend/jobs_store.hpp"

struct redisContext;
struct redisReply;

namespace batchd::http {

// One entry as Redis delivered it to this consumer.
struct StreamEntry {
  std::string stream;
  std::string id;                  // the entry's id in its stream
  std::vector<EntryField> fields;  // empty: deleted from the stream while it was pending
  std::uint64_t deliveries = 1;    // this delivery included
};

// An entry answered: its record written (first write wins; a deleted job stays deleted), the
// entry dead-lettered too when there is a reason, then acknowledged and deleted from its stream.
struct EntryFinish {
  std::string stream, entry_id;
  std::string job_id;  // empty: no record to write (an entry without a well-formed id)
  std::string value;   // the record: its state letter and the body a poll answers with
  bool has_record = false;
  std::string dead_reason;  // empty: not a dead letter
  std::vector<EntryField> fields;  // a dead letter's fields, copied into the dead-letter stream
  std::uint64_t deliveries = 1;
};
enum class FinishOutcome : std::uint8_t {
  kStored,     // the record now holds this answer
  kDuplicate,  // another delivery's answer was stored first (at-least-once)
  kDeleted,    // the job was deleted meanwhile: nothing stored
  kNoRecord,   // the entry named no job
  kFailed,     // Redis refused the script (out of memory, say): nothing done; to be tried again
};

class RedisJobsStreams {
 public:
  // `consumer`: this node's name in the consumer groups; `ttl`: how long a record is kept.
  RedisJobsStreams(const RedisAddress& address, std::string consumer, std::chrono::seconds ttl,
                   std::uint64_t dead_letters_kept);
  ~RedisJobsStreams();
  RedisJobsStreams(const RedisJobsStreams&) = delete;
  RedisJobsStreams& operator=(const RedisJobsStreams&) = delete;

  // Connected, or connects if its pause is over. False while Redis cannot be reached.
  bool ready();
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] const std::string& consumer() const noexcept { return consumer_; }

  // Makes the group on each stream (and the stream) where missing; its reading starts at the
  // stream's first entry, so jobs queued before any node came are served.
  bool ensure_groups(std::span<const std::string> streams);
  // New entries of `streams` for this consumer, at most `count` of each; waits up to `block` for
  // one when there is none (0: does not wait).
  bool read(std::span<const std::string> streams, std::size_t count, std::chrono::milliseconds block,
            std::vector<StreamEntry>& out);
  // Takes over up to `max` entries of `stream` pending on any consumer (this one included) for at
  // least `idle`: their consumer died, hung, or gave them back.
  bool claim_idle(const std::string& stream, std::chrono::milliseconds idle, std::size_t max,
                  std::vector<StreamEntry>& out);
  // Resets the idle time of entries this consumer still works on, so no one else claims them.
  bool touch(const std::string& stream, std::span<const std::string> entry_ids);
  // outcomes[i] answers finishes[i]. False: none is known to be done (each may be tried again:
  // finishing is idempotent).
  bool finish(std::span<const EntryFinish> finishes, std::vector<FinishOutcome>& outcomes);

  struct Depth {
    std::uint64_t entries = 0;      // unanswered: waiting or pending
    std::uint64_t pending = 0;      // delivered to a consumer, not yet acknowledged
    std::int64_t oldest_age_ms = 0; // the oldest unanswered entry's age (0: none)
  };
  bool depth(const std::string& stream, Depth& out);

 private:
  redisReply* command(std::span<const std::string> args);
  void drop(const std::string& why);

  const RedisAddress address_;
  const std::string consumer_;
  const std::string name_;  // host:port, for messages
  const std::chrono::seconds ttl_;
  const std::uint64_t dead_letters_kept_;
  redisContext* context_ = nullptr;
  std::int64_t backoff_ns_ = 0;
  std::int64_t next_attempt_ns_ = 0;
  std::string last_error_;
};

}  // namespace batchd::http

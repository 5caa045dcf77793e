// The consumer's side of the jobs queue (docs/JOBS.md): streams of entries per model and class,
// read by a consumer, acknowledged with the job's answer, claimed back when left idle. Two
// engines: Redis Streams (jobs_streams_redis.cpp), shared by every node, and the embedded queue
// in batchd-http's memory (jobs_store_memory.cpp), lost with the process. Every call is made by
// the jobs consumer's thread and says whether the engine answered.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "frontend/jobs_entry.hpp"

namespace batchd::http {

// One entry as the queue delivered it to this consumer.
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
  std::string dead_reason;         // empty: not a dead letter
  std::vector<EntryField> fields;  // a dead letter's fields, kept with it
  std::uint64_t deliveries = 1;
  std::string results_stream;  // where a stored answer is also published ("": nowhere; Redis only)
  std::uint32_t attempts = 0;  // times the engine refused it (kFailed)
};
enum class FinishOutcome : std::uint8_t {
  kStored,     // the record now holds this answer
  kDuplicate,  // another delivery's answer was stored first (at-least-once)
  kDeleted,    // the job was deleted meanwhile: nothing stored
  kNoRecord,   // the entry named no job
  kFailed,     // the engine refused (Redis out of memory, say): nothing done; to be tried again
};

struct StreamDepth {
  std::uint64_t entries = 0;       // unanswered: waiting or pending
  std::uint64_t pending = 0;       // delivered to a consumer, not yet acknowledged
  std::int64_t oldest_age_ms = 0;  // the oldest unanswered entry's age (0: none)
};

class JobsQueue {
 public:
  virtual ~JobsQueue() = default;
  // Reachable now (Redis: connects if its pause is over). False while it cannot be reached.
  virtual bool ready() = 0;
  // This consumer's name, for logs and the dead letters it writes.
  [[nodiscard]] virtual const std::string& consumer() const noexcept = 0;
  // Makes each stream (and its consumer group) where missing, reading from its first entry. False
  // if one cannot be made (a key of another type in its place, Redis unreachable).
  virtual bool ensure_streams(std::span<const std::string> streams) = 0;
  // New entries of `streams`, at most `count` of each; waits up to `block` for one when there is
  // none (0: does not wait).
  virtual bool read(std::span<const std::string> streams, std::size_t count, std::chrono::milliseconds block,
                    std::vector<StreamEntry>& out) = 0;
  // Takes over up to `max` entries of `stream` left pending for at least `idle` by any consumer
  // (this one included).
  virtual bool claim_idle(const std::string& stream, std::chrono::milliseconds idle, std::size_t max,
                          std::vector<StreamEntry>& out) = 0;
  // Resets the idle time of entries this consumer still works on; `lost` gets those of them that
  // another consumer has claimed meanwhile (this one stalled past the idle time).
  virtual bool touch(const std::string& stream, std::span<const std::string> entry_ids,
                     std::vector<std::string>& lost) = 0;
  // outcomes[i] answers finishes[i]. False: none is known to be done (finishing is idempotent).
  virtual bool finish(std::span<const EntryFinish> finishes, std::vector<FinishOutcome>& outcomes) = 0;
  virtual bool depth(const std::string& stream, StreamDepth& out) = 0;
};

}  // namespace batchd::http

// The dead-letter log: one record for each request whose input made the backend fail alone (the
// router split its batch until the input failed by itself, on every device it tried: a poison
// input, or one whose error repeats wherever it runs). A record says when, which input (its
// SHA-256 and size; the input itself only with include_inputs, as it may be private), the
// backend's error, the devices and the client. Records go to a JSON-lines file rotated by size
// (dead_letter_file.hpp), and the most recent stay in memory for batchctl. Recording never waits
// for the file: records queue, bounded, for the log's own writer thread, and one that finds the
// queue full is counted as dropped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "daemon/dead_letter_file.hpp"

namespace batchd {

struct DeadLetterOptions {
  std::string path;                              // the JSON-lines file; empty: memory only
  std::uint64_t max_file_bytes = 16ULL << 20;    // past this the file is rotated to path.1
  std::size_t recent_entries = 256;              // kept in memory for batchctl dead-letters
  std::size_t queue_capacity = 1024;             // records waiting for the writer; more are dropped
  bool include_inputs = false;                   // opt-in: file records carry the input itself
};

// What the router knows of a request that failed alone. The views need only outlive the call.
struct DeadLetterFacts {
  std::string_view model;           // the model it was sent to, by name
  std::string_view input;
  std::string_view error;           // the backend's message
  unsigned device = 0;              // where it failed last
  std::uint64_t devices_tried = 0;  // bit d: it failed alone on device d
  bool proven = false;              // a known-good input still ran there: the input is at fault
  std::uint64_t client_id = 0;      // the daemon's session id
  std::int64_t pid = 0;             // the client's, from its control connection's credentials
  std::int64_t uid = -1;
  std::uint64_t request_id = 0;     // the client's own name for the request; 0: none given
  std::uint32_t slot = 0;           // with client_id and generation: the request in this session
  std::uint32_t generation = 0;
};

class DeadLetterLog {
 public:
  // Requests remembered to record each once: a repeat further back than this many records is
  // recorded again.
  static constexpr std::size_t kRememberedRequests = 1U << 16;

  // Opens (creates, or appends to) the file when the options name one; throws std::system_error
  // saying why it cannot. Records queue until start().
  explicit DeadLetterLog(DeadLetterOptions options);
  ~DeadLetterLog();
  DeadLetterLog(const DeadLetterLog&) = delete;
  DeadLetterLog& operator=(const DeadLetterLog&) = delete;

  // Starts the writer thread. Call once.
  void start();
  // Writes what is queued, then stops the writer. Safe to call more than once.
  void stop() noexcept;

  // Any thread. Records one failed request, once: a request already recorded (the same client
  // request id from the same uid, or, without one, the same session, slot and generation) is
  // ignored. Hashes the input here; never waits for the writer or the file: when the queue is
  // full the record is dropped and counted.
  void record(const DeadLetterFacts& facts) noexcept;

  // Returns once the writer has handled every record queued before the call. Any thread but the
  // writer; returns at once when the writer is not running.
  void flush();

  // The most recent records as JSON lines, oldest first, each as the file has it but without
  // the input; with `uid`, only that user's. Any thread.
  [[nodiscard]] std::string recent(std::optional<std::int64_t> uid) const;

  // Distinct failed requests recorded (dropped ones included), records lost (a full queue, or
  // the file refused the write), and repeats ignored.
  [[nodiscard]] std::uint64_t recorded() const noexcept;
  [[nodiscard]] std::uint64_t dropped() const noexcept;
  [[nodiscard]] std::uint64_t duplicates() const noexcept;

  [[nodiscard]] const DeadLetterOptions& options() const noexcept { return options_; }

 private:
  // One queued record, as the writer formats it.
  struct Record {
    std::int64_t unix_ms = 0;
    std::string model;
    char sha256[64] = {};  // lowercase hex
    std::uint64_t input_bytes = 0;
    std::string error;
    std::string input;  // only with include_inputs
    unsigned device = 0;
    std::uint64_t devices_tried = 0;
    bool proven = false;
    std::uint64_t client_id = 0;
    std::int64_t pid = 0;
    std::int64_t uid = -1;
    std::uint64_t request_id = 0;
  };
  struct Key {
    std::uint64_t who;   // (uid << 1) | 1 with a request id; (session id << 1) without
    std::uint64_t what;  // the request id, or (slot << 32) | generation
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& key) const noexcept;
  };
  struct RecentLine {
    std::int64_t uid;
    std::string line;
  };

  static Key key_of(const DeadLetterFacts& facts) noexcept;
  // Under mu_: whether the request was recorded already; remembers it if not.
  bool seen_before_locked(const Key& key);
  void writer() noexcept;
  // Writer thread: formats, keeps and writes one record.
  void handle(const Record& record);
  // A record as one JSON line (ending in a newline), with or without its input.
  static std::string format(const Record& record, bool with_input);

  DeadLetterOptions options_;
  std::optional<DeadLetterFile> file_;  // writer thread only, once started

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the writer: records queued, or stopping
  std::condition_variable handled_;   // flush(): the writer handled a round
  std::vector<Record> queue_;         // guarded by mu_; at most queue_capacity
  std::unordered_set<Key, KeyHash> seen_;  // guarded by mu_
  std::deque<Key> seen_order_;        // guarded by mu_: oldest first, to forget beyond the bound
  std::uint64_t queued_total_ = 0;    // guarded by mu_: records ever queued
  std::uint64_t handled_total_ = 0;   // guarded by mu_: of those, handled by the writer
  std::uint64_t recorded_ = 0;        // guarded by mu_
  std::uint64_t dropped_ = 0;         // guarded by mu_
  std::uint64_t duplicates_ = 0;      // guarded by mu_
  bool stopping_ = false;             // guarded by mu_
  bool running_ = false;              // guarded by mu_

  mutable std::mutex recent_mu_;
  std::deque<RecentLine> recent_;     // guarded by recent_mu_; at most recent_entries

  bool file_failing_ = false;  // writer thread only: a warning was logged, none since
  std::thread writer_;
};

}  // namespace batchd

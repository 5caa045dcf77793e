// A node's share of the jobs queue (docs/JOBS.md): one thread, a consumer of every model's streams
// (with Redis, a member of each stream's consumer group, beside the other nodes'), that takes entries only while its daemon has room for their inputs (a
// window of inputs in flight, at most half the client's slots, halved when the daemon sheds), so
// a burst waits in Redis and idle nodes take it. Each job's inputs run as ordinary requests of its
// model and class; its answer is stored and its entry acknowledged together. Entries that another
// consumer left idle (it died or hung) are claimed; one delivered more than max_deliveries times,
// malformed, or whose input fails alone is dead-lettered with its reason; one past its deadline
// ends expired.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client_lib/client.hpp"
#include "frontend/jobs_entry.hpp"
#include "frontend/jobs_queue.hpp"

namespace batchd::http {

struct JobsCounters;

struct JobsConsumerOptions {
  ClientOptions client;
  JobEntryLimits limits;
  std::chrono::milliseconds default_timeout{5000};  // an input's run, where the entry names none
  std::chrono::milliseconds claim_idle{5000};       // an entry idle this long on its consumer is claimed
  std::uint32_t max_deliveries = 3;
  std::uint32_t max_inputs_in_flight = 1024;
  // Models whose answers are also published on their results stream ("*": every model).
  std::vector<std::string> results_models;
};

// A name no other consumer of a Redis group has: host, process id and 32 random bits.
std::string jobs_consumer_name();

class JobsConsumer {
 public:
  // `queue` outlives the consumer.
  JobsConsumer(const JobsConsumerOptions& options, JobsQueue& queue, JobsCounters& counters);
  // Stops taking entries and waits up to `drain` for those it holds; what is left stays pending
  // in Redis, where another node claims it.
  ~JobsConsumer();
  JobsConsumer(const JobsConsumer&) = delete;
  JobsConsumer& operator=(const JobsConsumer&) = delete;
  void stop(std::chrono::milliseconds drain);

  // Each stream's depth, as last sampled (about once a second), for /metrics. Any thread.
  struct ModelDepth {
    std::string model, priority;
    StreamDepth depth;
  };
  [[nodiscard]] std::vector<ModelDepth> depths() const;

 private:
  struct StreamName {
    std::string key, model;
    Priority priority;
    std::string results;  // the model's results stream, or "" when it publishes none
  };
  struct Held {
    StreamEntry entry;
    JobEntry job;
    const StreamName* stream = nullptr;
    std::vector<std::optional<Result>> results;
    std::size_t remaining = 0;
    std::uint32_t runs = 0;  // on this node, answered or failed
  };

  void run();
  void attach();
  void refresh_streams();
  void take(std::vector<StreamEntry>&& entries);
  void submit_waiting();
  void on_answer(std::uint64_t serial, std::size_t index, Result&& result);
  void conclude(std::uint64_t serial);
  void finish(const StreamEntry& entry, std::string job_id, bool has_record, std::string value,
              std::string dead_reason);
  void expire(const StreamEntry& entry, const JobEntry& job);
  [[nodiscard]] std::size_t max_window() const noexcept;
  void flush_finished();
  void touch_held();
  void claim_idle();
  void read_new(bool idle);
  void sample_depths();
  [[nodiscard]] std::size_t credit() const noexcept;
  const StreamName* stream_named(const std::string& key) const;

  const JobsConsumerOptions options_;
  JobsCounters& counters_;
  JobsQueue& queue_;
  std::unique_ptr<Client> client_;

  std::vector<StreamName> streams_;  // every model's, high first
  std::unordered_map<std::uint64_t, Held> held_;  // by serial: taken, not yet answered
  std::deque<std::uint64_t> waiting_;             // held, not yet submitted (no room in the daemon)
  std::vector<EntryFinish> finished_;             // answered, not yet written to Redis
  std::uint64_t next_serial_ = 0;
  std::size_t inputs_in_flight_ = 0;
  std::size_t window_ = 0;  // inputs in flight allowed now
  std::int64_t retry_submit_ns_ = 0;
  std::int64_t next_attach_ns_ = 0;     // after a failed attach, the next waits until then
  std::int64_t attach_backoff_ns_ = 0;
  std::string attach_error_;            // the last failure's reason, said once

  mutable std::mutex depths_mu_;
  std::vector<ModelDepth> depths_;  // guarded by depths_mu_

  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> drain_until_ns_{0};
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace batchd::http

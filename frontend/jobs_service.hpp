// What batchd-http's event loops share for asynchronous jobs: the store (and queue), each loop's
// inbox (replies from the Redis thread), the jobs consumer that runs the queued jobs on this
// node's daemon, and the jobs counters for /metrics. Made once before the loops start; outlives
// them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "frontend/jobs_store.hpp"

namespace batchd::http {
class JobsConsumer;
class JobsQueue;
}  // namespace batchd::http

namespace batchd::http {

// Process-wide; any thread adds (relaxed: counters, read for /metrics only).
struct JobsCounters {
  std::atomic<std::uint64_t> submitted{0};     // accepted with 202
  std::atomic<std::uint64_t> done{0};          // every input answered; result stored
  std::atomic<std::uint64_t> failed{0};        // an input failed; the error stored
  std::atomic<std::uint64_t> cancelled{0};     // deleted while pending
  std::atomic<std::uint64_t> expired{0};       // records dropped at their TTL (embedded store only)
  std::atomic<std::uint64_t> store_full{0};    // submissions refused: the bound was reached
  std::atomic<std::uint64_t> store_errors{0};  // store calls that failed (Redis unreachable, ...)
  // The queue's consumer on this node: entries taken (redelivered: taken again after another consumer
  // left them), given back after a transient failure, dead-lettered, ended expired at their
  // deadline, and answers found already stored by another delivery.
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<std::uint64_t> redelivered{0};
  std::atomic<std::uint64_t> released{0};
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> deadline_expired{0};
  std::atomic<std::uint64_t> duplicates{0};

  static void add(std::atomic<std::uint64_t>& counter) noexcept { counter.fetch_add(1, std::memory_order_relaxed); }
};

// One mailbox per event loop, emptied by that loop when its wake eventfd fires.
class JobsInboxes {
 public:
  using Mail = std::vector<std::function<void()>>;  // store replies to run

  // wake_fds[w] is worker w's eventfd (not owned; it outlives this).
  explicit JobsInboxes(std::span<const int> wake_fds);
  // Any thread. The loop is woken only when its box was empty, so a burst costs one write.
  void post(unsigned worker, std::function<void()> task);
  // Worker w's thread: takes everything waiting.
  Mail take(unsigned worker);

 private:
  struct Box {
    std::mutex mu;
    Mail mail;  // guarded by mu
  };
  void wake_if_first(unsigned worker, bool was_empty);

  std::vector<int> wake_fds_;
  std::unique_ptr<Box[]> boxes_;
};

struct JobsOptions {
  std::chrono::seconds ttl{600};  // how long a finished job's result is kept
  JobsStoreLimits limits;
  std::uint32_t max_inputs = 256;  // per job
  std::string redis_url;           // empty: the embedded store
  // The queue (docs/JOBS.md): unanswered entries a model's stream of one class holds at most; a
  // job's deadline to start, by default and at most; the consumer's settings.
  std::uint64_t queue_max = 1'000'000;
  std::chrono::seconds default_deadline{3600};
  std::chrono::seconds max_deadline{86400};
  std::chrono::milliseconds claim_idle{5000};
  std::uint32_t max_deliveries = 3;
  std::uint32_t inputs_in_flight = 1024;
  std::chrono::milliseconds default_timeout{5000};
  std::chrono::milliseconds max_timeout{60000};
  std::string socket_path;  // the daemon the consumer feeds; empty: its default
  // With Redis: models whose answers are also published on batchd:results:{model} ("*": all),
  // that stream trimmed to about results_kept entries.
  std::vector<std::string> results_models;
  std::uint64_t results_kept = 100000;
};

class JobsService {
 public:
  // Throws std::invalid_argument for a bad Redis URL, or results streams without Redis. Redis itself may be down: jobs calls then
  // answer 503 until it is up. The consumer starts at once and attaches to the daemon by itself.
  JobsService(const JobsOptions& options, std::span<const int> wake_fds);
  ~JobsService();
  JobsService(const JobsService&) = delete;
  JobsService& operator=(const JobsService&) = delete;

  [[nodiscard]] const JobsOptions& options() const noexcept { return options_; }
  [[nodiscard]] JobsStore& store() noexcept { return *store_; }
  [[nodiscard]] JobsInboxes& inboxes() noexcept { return inboxes_; }
  [[nodiscard]] JobsCounters& counters() noexcept { return counters_; }
  [[nodiscard]] bool uses_redis() const noexcept { return !options_.redis_url.empty(); }

  // The jobs series in the Prometheus text format.
  void render_metrics(std::string& out) const;

  // Stops the queue's consumer (if any), giving it up to `drain` to answer what it holds.
  void stop_consumer(std::chrono::milliseconds drain);

 private:
  JobsOptions options_;
  JobsCounters counters_;
  JobsInboxes inboxes_;
  std::unique_ptr<JobsStore> store_;  // after inboxes_, so it (and Redis's thread) goes first
  std::unique_ptr<JobsQueue> redis_queue_;  // the consumer's own connection to Redis
  JobsQueue* queue_ = nullptr;              // redis_queue_, or the embedded store itself
  std::unique_ptr<JobsConsumer> consumer_;  // last: stopped first; it uses all of the above
};

}  // namespace batchd::http

// The embedded jobs store: every event loop of the process reads and writes one map under one
// mutex. Each call holds it for a map operation and a string copy, far less than the HTTP parsing
// around it, so the loops do not queue on it. Records expire in deadline order, lazily: each call
// first drops those past their time, so no timer thread is needed and an idle store costs nothing.
#include <fmt/format.h>

#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "frontend/jobs_service.hpp"
#include "frontend/jobs_store.hpp"
#include "shm/clock.hpp"

namespace batchd::http {

namespace {

// What a record costs besides its id and value: the map node, the expiry entry and their
// strings' headers, roughly; it keeps a flood of empty jobs from slipping under the byte bound.
constexpr std::uint64_t kRecordOverheadBytes = 160;

class MemoryJobsStore final : public JobsStore {
 public:
  MemoryJobsStore(const JobsStoreLimits& limits, JobsCounters& counters) : limits_(limits), counters_(counters) {}

  void create(unsigned, std::string id, std::string value, std::chrono::seconds ttl, StoreCallback done) override {
    done(create_now(std::move(id), std::move(value), ttl));
  }

  void complete(unsigned, std::string id, std::string value, std::chrono::seconds ttl,
                StoreCallback done) override {
    done(complete_now(id, std::move(value), ttl));
  }

  void get(unsigned, std::string id, StoreCallback done) override {
    StoreReply reply;
    {
      std::lock_guard lock(mu_);
      expire(shm::monotonic_ns());
      const auto it = records_.find(id);
      if (it == records_.end()) {
        reply.status = StoreStatus::kNotFound;
      } else {
        reply.value = it->second.value;
      }
    }
    done(std::move(reply));
  }

  void remove(unsigned, std::string id, StoreCallback done) override {
    StoreReply reply;
    {
      std::lock_guard lock(mu_);
      expire(shm::monotonic_ns());
      const auto it = records_.find(id);
      if (it == records_.end()) {
        reply.status = StoreStatus::kNotFound;
      } else {
        reply.value = std::move(it->second.value);
        erase(it);
      }
    }
    done(std::move(reply));
  }

  void enqueue(unsigned, std::string, std::string, std::chrono::seconds, std::string,
               std::vector<std::pair<std::string, std::string>>, std::uint64_t, StoreCallback done) override {
    done({StoreStatus::kUnavailable, {}, "the embedded jobs store runs jobs at once; it has no queue"});
  }
  [[nodiscard]] bool queues() const noexcept override { return false; }

  [[nodiscard]] std::int64_t size() const override {
    std::lock_guard lock(mu_);
    return static_cast<std::int64_t>(records_.size());
  }

 private:
  struct Record {
    std::string value;
    std::int64_t expires_ns = 0;
    std::uint64_t bytes = 0;  // cost() when stored, so erasing needs no value
  };
  using Records = std::unordered_map<std::string, Record>;

  static std::uint64_t cost(const std::string& id, const std::string& value) noexcept {
    return id.size() + value.size() + kRecordOverheadBytes;
  }

  static std::int64_t deadline(std::int64_t now_ns, std::chrono::seconds ttl) noexcept {
    return now_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(ttl).count();
  }

  StoreReply create_now(std::string id, std::string value, std::chrono::seconds ttl) {
    std::lock_guard lock(mu_);
    const std::int64_t now_ns = shm::monotonic_ns();
    expire(now_ns);
    if (records_.contains(id)) return {StoreStatus::kExists, {}, "the job id is taken"};
    const std::uint64_t bytes = cost(id, value);
    if (records_.size() >= limits_.max_jobs) {
      return {StoreStatus::kFull, {}, fmt::format("the jobs store holds its maximum of {} jobs", limits_.max_jobs)};
    }
    if (bytes_ + bytes > limits_.max_bytes) {
      return {StoreStatus::kFull, {},
              fmt::format("the jobs store holds {} of its {} bytes", bytes_, limits_.max_bytes)};
    }
    const std::int64_t expires_ns = deadline(now_ns, ttl);
    expiry_.emplace(expires_ns, id);
    bytes_ += bytes;
    records_.emplace(std::move(id), Record{std::move(value), expires_ns, bytes});
    return {};
  }

  // A result is stored whatever the byte bound says: the job was accepted, and its caller is
  // owed the answer. The bound refuses new jobs while it is exceeded.
  StoreReply complete_now(const std::string& id, std::string value, std::chrono::seconds ttl) {
    std::lock_guard lock(mu_);
    const std::int64_t now_ns = shm::monotonic_ns();
    expire(now_ns);
    const auto it = records_.find(id);
    if (it == records_.end()) return {StoreStatus::kNotFound, {}, {}};
    Record& record = it->second;
    const std::uint64_t bytes = cost(id, value);
    bytes_ = bytes_ - record.bytes + bytes;
    record.bytes = bytes;
    record.value = std::move(value);
    expiry_.erase({record.expires_ns, id});
    record.expires_ns = deadline(now_ns, ttl);
    expiry_.emplace(record.expires_ns, id);
    return {};
  }

  // Precondition: mu_ held.
  void expire(std::int64_t now_ns) {
    while (!expiry_.empty() && expiry_.begin()->first <= now_ns) {
      const auto it = records_.find(expiry_.begin()->second);
      if (it != records_.end()) {
        erase(it);
        JobsCounters::add(counters_.expired);
      } else {
        expiry_.erase(expiry_.begin());
      }
    }
  }

  // Precondition: mu_ held.
  void erase(Records::iterator it) {
    bytes_ -= it->second.bytes;
    expiry_.erase({it->second.expires_ns, it->first});
    records_.erase(it);
  }

  const JobsStoreLimits limits_;
  JobsCounters& counters_;  // borrowed; the service outlives the store
  mutable std::mutex mu_;
  Records records_;                                       // guarded by mu_
  std::set<std::pair<std::int64_t, std::string>> expiry_;  // guarded by mu_: (deadline, id)
  std::uint64_t bytes_ = 0;                               // guarded by mu_: cost() of every record
};

}  // namespace

std::unique_ptr<JobsStore> make_memory_jobs_store(const JobsStoreLimits& limits, JobsCounters& counters) {
  return std::make_unique<MemoryJobsStore>(limits, counters);
}

}  // namespace batchd::http

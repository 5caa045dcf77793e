// Where asynchronous jobs live between their submission and their last poll: an embedded store
// shared by the process's event loops (jobs_store_memory.cpp), or Redis, shared by many nodes
// (jobs_store_redis.cpp). A store keeps opaque values by job id, each with its own time to live,
// and queues each job's entry for the jobs consumer (jobs_queue.hpp); the value is the job's state
// letter followed by the JSON body a poll answers with, so a poll costs the store one read and the
// loop no re-encoding.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redis/redis_connect.hpp"

namespace batchd::http {

class JobsInboxes;
struct JobsCounters;

// The first byte of a stored value.
enum class JobState : char { kPending = 'P', kDone = 'D', kFailed = 'F', kExpired = 'X' };

inline std::string encode_job(JobState state, std::string_view body) {
  std::string value(1, static_cast<char>(state));
  value.append(body);
  return value;
}

enum class StoreStatus : std::uint8_t {
  kOk,
  kNotFound,     // no such id (never was, expired, or deleted)
  kExists,       // enqueue: the id is taken (128 random bits: practically never)
  kFull,         // enqueue: the store's bound is reached
  kQueueFull,    // enqueue: the stream holds its maximum of unanswered entries
  kUnavailable,  // the store cannot be reached now (Redis down or too far behind)
};

struct StoreReply {
  StoreStatus status = StoreStatus::kOk;
  std::string value;    // get and remove: the stored value
  std::string message;  // kFull, kQueueFull and kUnavailable: why, for a person
};

// Runs on the event loop that made the call: at once, or later from its inbox.
using StoreCallback = std::function<void(StoreReply&&)>;

struct JobsStoreLimits {
  std::uint64_t max_jobs = 100000;              // records held at once (embedded store)
  std::uint64_t max_bytes = std::uint64_t{256} << 20;  // their ids and values (embedded store)
};

// Every call names the worker (event loop) that asks, so the reply can find its way back; each
// callback is called exactly once, on that worker's thread. Safe to call from any worker.
class JobsStore {
 public:
  virtual ~JobsStore() = default;
  // Stores the job's pending record and appends its entry (field, value pairs) to `stream`, both
  // or neither, unless the id is taken (kExists), the store is full (kFull) or the stream holds
  // max_entries unanswered (kQueueFull). The jobs consumer (jobs_consumer.hpp) runs it and stores its
  // answer.
  virtual void enqueue(unsigned worker, std::string id, std::string value, std::chrono::seconds ttl,
                       std::string stream, std::vector<std::pair<std::string, std::string>> fields,
                       std::uint64_t max_entries, StoreCallback done) = 0;
  virtual void get(unsigned worker, std::string id, StoreCallback done) = 0;
  // Deletes the record and answers with the value it had.
  virtual void remove(unsigned worker, std::string id, StoreCallback done) = 0;
  // Records held now, or -1 where the store cannot say cheaply (Redis).
  [[nodiscard]] virtual std::int64_t size() const = 0;
};

class JobsQueue;

// The embedded store and queue: one object under one mutex, seen by the loops as the store and
// by the jobs consumer as its queue. Records expire lazily in deadline order; callbacks run at
// once, on the caller's thread. answer_ttl: how long a finished job's record is kept.
struct EmbeddedJobs {
  std::unique_ptr<JobsStore> store;  // owns the object
  JobsQueue* queue = nullptr;        // the same object
};
EmbeddedJobs make_memory_jobs_store(const JobsStoreLimits& limits, std::chrono::seconds answer_ttl,
                                    JobsCounters& counters);

// Redis through hiredis on a thread of its own, fed by a bounded queue; replies reach each worker
// through its inbox. The loops never wait on Redis. Connects lazily and again after a failure,
// with a growing pause; meanwhile every call answers kUnavailable at once.
std::unique_ptr<JobsStore> make_redis_jobs_store(const redis::RedisAddress& address, JobsInboxes& inboxes,
                                                 JobsCounters& counters);

}  // namespace batchd::http

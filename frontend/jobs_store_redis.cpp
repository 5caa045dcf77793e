// The Redis jobs store. One thread per process talks to Redis with hiredis's synchronous API,
// under a connect and a command timeout, so a stuck Redis costs that thread a bounded wait and the
// event loops nothing: they only append to a bounded queue and get each reply through their inbox.
// The thread sends whatever has queued as one pipeline, which is what keeps the rate up with a
// single connection. A failed connection fails what it carried and what queued behind it, so a
// hung Redis costs a caller at most a connect and a command timeout; the next batch reconnects, and
// after failed connects the thread waits a growing pause (50 ms doubling to 2 s), answering
// kUnavailable at once meanwhile, so recovery needs nothing from an operator.
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "frontend/jobs_entry.hpp"
#include "frontend/jobs_service.hpp"
#include "redis/redis_connect.hpp"
#include "frontend/jobs_store.hpp"
#include "shm/clock.hpp"

namespace batchd::http {

namespace {

constexpr std::size_t kMaxQueued = 16384;  // commands waiting for the thread; more answer kUnavailable
constexpr std::size_t kMaxPipeline = 512;  // commands sent before their replies are read
// The pending record and the stream entry go in together, and only below the stream's bound:
// -1 full, 0 the id taken, else the entry's id. An acknowledged entry is deleted (XDEL), so XLEN
// counts what is not yet answered; nothing accepted is ever trimmed.
constexpr const char* kEnqueueScript = R"lua(
if redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[3]) then return -1 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 0 end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
)lua";

class RedisJobsStore final : public JobsStore {
 public:
  RedisJobsStore(const redis::RedisAddress& address, JobsInboxes& inboxes)
      : inboxes_(inboxes), connection_(address, "batchd-http: jobs store") {
    thread_ = std::thread([this] { run(); });
  }

  ~RedisJobsStore() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void enqueue(unsigned worker, std::string id, std::string value, std::chrono::seconds ttl, std::string stream,
               std::vector<std::pair<std::string, std::string>> fields, std::uint64_t max_entries,
               StoreCallback done) override {
    Command command{Kind::kEnqueue, worker, job_record_key(id), std::move(done), {}};
    command.args = {"EVAL", kEnqueueScript, "2", command.key, std::move(stream), std::move(value),
                    std::to_string(ttl.count()), std::to_string(max_entries)};
    for (auto& [name, field] : fields) {
      command.args.push_back(std::move(name));
      command.args.push_back(std::move(field));
    }
    push(std::move(command));
  }
  void get(unsigned worker, std::string id, StoreCallback done) override {
    push({Kind::kGet, worker, job_record_key(id), std::move(done), {}});
  }
  void remove(unsigned worker, std::string id, StoreCallback done) override {
    push({Kind::kRemove, worker, job_record_key(id), std::move(done), {}});
  }
  [[nodiscard]] std::int64_t size() const override { return -1; }

 private:
  enum class Kind : std::uint8_t { kEnqueue, kGet, kRemove };
  struct Command {
    Kind kind;
    unsigned worker;
    std::string key;
    StoreCallback done;
    std::vector<std::string> args;  // kEnqueue: the whole command
  };

  // Loop thread. A full queue means Redis is far behind: saying so at once beats waiting.
  void push(Command&& command) {
    {
      std::lock_guard lock(mu_);
      if (queue_.size() < kMaxQueued) {
        queue_.push_back(std::move(command));
        if (queue_.size() == 1) cv_.notify_one();
        return;
      }
    }
    command.done({StoreStatus::kUnavailable, {}, "the jobs store (Redis at " + connection_.name() + ") is too far behind"});
  }

  void run() {
    std::vector<Command> batch;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        const std::size_t n = std::min(queue_.size(), kMaxPipeline);
        for (std::size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      execute(batch);
      batch.clear();
    }
  }

  void execute(std::vector<Command>& batch) {
    redisContext* context = connection_.get();
    if (context == nullptr) {
      for (Command& c : batch) deliver(c, unavailable(connection_.last_error()));
      return;
    }
    for (const Command& c : batch) append(context, c);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(context, &raw) != REDIS_OK) {
        connection_.drop(context->errstr);
        for (; i < batch.size(); ++i) deliver(batch[i], unavailable(connection_.last_error()));
        fail_queued();
        return;
      }
      auto* reply = static_cast<redisReply*>(raw);
      deliver(batch[i], interpret(batch[i].kind, *reply));
      freeReplyObject(reply);
    }
  }

  // After a connection failed (a timeout, say), what queued behind it is failed too: a Redis that
  // hangs would otherwise cost every queued batch its own command timeout, one after the other.
  void fail_queued() {
    std::deque<Command> queued;
    {
      std::lock_guard lock(mu_);
      queued.swap(queue_);
    }
    for (Command& c : queued) deliver(c, unavailable(connection_.last_error()));
  }

  static void append(redisContext* context, const Command& c) {
    switch (c.kind) {
      case Kind::kGet: redisAppendCommand(context, "GET %b", c.key.data(), c.key.size()); return;
      case Kind::kRemove: redisAppendCommand(context, "GETDEL %b", c.key.data(), c.key.size()); return;
      case Kind::kEnqueue: redis::append_command(context, c.args); return;
    }
  }

  StoreReply interpret(Kind kind, const redisReply& reply) const {
    if (reply.type == REDIS_REPLY_ERROR) {
      const std::string text(reply.str, reply.len);
      // Redis at its maxmemory (noeviction) refuses writes with OOM: the store is full.
      if (text.starts_with("OOM")) return {StoreStatus::kFull, {}, "the jobs store (Redis) is full: " + text};
      return unavailable("Redis answered " + text);
    }
    if (kind == Kind::kEnqueue) {
      if (reply.type == REDIS_REPLY_STRING) return {};
      if (reply.type == REDIS_REPLY_INTEGER && reply.integer == 0) return {StoreStatus::kExists, {}, {}};
      if (reply.type == REDIS_REPLY_INTEGER) {
        return {StoreStatus::kQueueFull, {}, "the jobs queue is full: this model's stream holds its maximum of unanswered jobs"};
      }
      return unavailable("Redis gave an unexpected reply type " + std::to_string(reply.type));
    }
    if (reply.type == REDIS_REPLY_NIL) return {StoreStatus::kNotFound, {}, {}};
    if (reply.type == REDIS_REPLY_STRING) {
      return {StoreStatus::kOk, std::string(reply.str, reply.len), {}};
    }
    return unavailable("Redis gave an unexpected reply type " + std::to_string(reply.type));
  }

  StoreReply unavailable(const std::string& why) const {
    return {StoreStatus::kUnavailable, {}, "the jobs store (Redis at " + connection_.name() + ") is unavailable: " + why};
  }

  void deliver(Command& c, StoreReply&& reply) {
    inboxes_.post(c.worker, [done = std::move(c.done), reply = std::move(reply)]() mutable { done(std::move(reply)); });
  }

  JobsInboxes& inboxes_;  // borrowed; the service outlives the store

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;  // guarded by mu_
  bool stop_ = false;          // guarded by mu_

  redis::Reconnecting connection_;  // the Redis thread's alone
  std::thread thread_;  // last: it starts once everything above is built
};

}  // namespace

std::unique_ptr<JobsStore> make_redis_jobs_store(const redis::RedisAddress& address, JobsInboxes& inboxes,
                                                 JobsCounters&) {
  return std::make_unique<RedisJobsStore>(address, inboxes);
}

}  // namespace batchd::http

// The embedded jobs store and queue: every event loop of the process and its jobs consumer share
// one object under one mutex, the job records (by id) beside the queue's streams. Each call holds
// the mutex for a map operation and a string copy, far less than the HTTP parsing around it, so
// the loops do not queue on it. Records expire in deadline order, lazily: each call first drops
// those past their time, so no timer thread is needed and an idle store costs nothing. The queue
// is the Redis one in miniature (docs/JOBS.md): entries wait, are delivered to the consumer,
// given back when left idle, and answered with their record in one step; all of it is lost with
// the process.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "frontend/jobs_queue.hpp"
#include "frontend/jobs_service.hpp"
#include "frontend/jobs_store.hpp"
#include "shm/clock.hpp"

namespace batchd::http {

namespace {

// What a record costs besides its id and value: the map node, the expiry entry and their
// strings' headers, roughly; it keeps a flood of empty jobs from slipping under the byte bound.
constexpr std::uint64_t kRecordOverheadBytes = 160;
const std::string kLocalConsumer = "local";

class MemoryJobs final : public JobsStore, public JobsQueue {
 public:
  MemoryJobs(const JobsStoreLimits& limits, std::chrono::seconds answer_ttl, JobsCounters& counters)
      : limits_(limits), answer_ttl_(answer_ttl), counters_(counters) {}

  // The store, for the event loops.

  void enqueue(unsigned, std::string id, std::string value, std::chrono::seconds ttl, std::string stream,
               std::vector<EntryField> fields, std::uint64_t max_entries, StoreCallback done) override {
    StoreReply reply;
    {
      std::lock_guard lock(mu_);
      const std::int64_t now_ns = shm::monotonic_ns();
      expire(now_ns);
      Stream& s = streams_[stream];
      if (s.waiting.size() + s.pending.size() >= max_entries) {
        reply = {StoreStatus::kQueueFull, {},
                 fmt::format("the jobs queue is full: this model's queue holds its maximum of {} unanswered jobs",
                             max_entries)};
      } else {
        reply = create_locked(id, std::move(value), ttl, now_ns);
      }
      if (reply.status == StoreStatus::kOk) {
        const std::uint64_t seq = ++next_seq_;
        queued_.emplace(id, std::make_pair(stream, seq));
        s.waiting.emplace(seq, Entry{std::move(id), std::move(fields), now_ns});
      }
    }
    if (reply.status == StoreStatus::kOk) arrived_.notify_one();
    done(std::move(reply));
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

  // A job deleted while it waits leaves the queue with its record: its inputs never run.
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
      if (const auto q = queued_.find(id); q != queued_.end()) {
        streams_[q->second.first].waiting.erase(q->second.second);
        queued_.erase(q);
      }
    }
    done(std::move(reply));
  }

  [[nodiscard]] std::int64_t size() const override {
    std::lock_guard lock(mu_);
    return static_cast<std::int64_t>(records_.size());
  }

  // The queue, for the jobs consumer.

  bool ready() override { return true; }
  [[nodiscard]] const std::string& consumer() const noexcept override { return kLocalConsumer; }

  bool ensure_streams(std::span<const std::string> streams) override {
    std::lock_guard lock(mu_);
    for (const std::string& s : streams) streams_[s];
    return true;
  }

  bool read(std::span<const std::string> streams, std::size_t count, std::chrono::milliseconds block,
            std::vector<StreamEntry>& out) override {
    std::unique_lock lock(mu_);
    const auto take = [&] {
      const std::int64_t now_ns = shm::monotonic_ns();
      bool any = false;
      for (const std::string& key : streams) {
        Stream& s = streams_[key];
        for (std::size_t n = 0; n < count && !s.waiting.empty(); ++n) {
          auto node = s.waiting.extract(s.waiting.begin());
          queued_.erase(node.mapped().job_id);
          out.push_back(delivery(key, node.key(), node.mapped(), 1));
          s.pending.emplace(node.key(), Pending{std::move(node.mapped()), now_ns, 1});
          any = true;
        }
      }
      return any;
    };
    if (!take() && block.count() > 0) {
      arrived_.wait_for(lock, block);
      take();
    }
    return true;
  }

  bool claim_idle(const std::string& stream, std::chrono::milliseconds idle, std::size_t max,
                  std::vector<StreamEntry>& out) override {
    std::lock_guard lock(mu_);
    const std::int64_t now_ns = shm::monotonic_ns();
    const std::int64_t idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(idle).count();
    std::size_t claimed = 0;
    for (auto& [seq, p] : streams_[stream].pending) {
      if (claimed == max) break;
      if (now_ns - p.delivered_ns < idle_ns) continue;
      p.delivered_ns = now_ns;
      ++p.deliveries;
      out.push_back(delivery(stream, seq, p.entry, p.deliveries));
      ++claimed;
    }
    return true;
  }

  // One consumer: nothing is ever claimed from it, so nothing is lost.
  bool touch(const std::string& stream, std::span<const std::string> entry_ids, std::vector<std::string>&) override {
    std::lock_guard lock(mu_);
    const std::int64_t now_ns = shm::monotonic_ns();
    Stream& s = streams_[stream];
    for (const std::string& id : entry_ids) {
      if (const auto it = s.pending.find(seq_of(id)); it != s.pending.end()) it->second.delivered_ns = now_ns;
    }
    return true;
  }

  bool finish(std::span<const EntryFinish> finishes, std::vector<FinishOutcome>& outcomes) override {
    outcomes.clear();
    std::lock_guard lock(mu_);
    const std::int64_t now_ns = shm::monotonic_ns();
    expire(now_ns);
    for (const EntryFinish& f : finishes) {
      outcomes.push_back(settle(f, now_ns));  // a dead letter lives on in the consumer's log alone
      streams_[f.stream].pending.erase(seq_of(f.entry_id));
    }
    return true;
  }

  bool depth(const std::string& stream, StreamDepth& out) override {
    std::lock_guard lock(mu_);
    const Stream& s = streams_[stream];
    out = {};
    out.entries = s.waiting.size() + s.pending.size();
    out.pending = s.pending.size();
    std::int64_t oldest_ns = 0;
    if (!s.waiting.empty()) oldest_ns = s.waiting.begin()->second.enqueued_ns;
    if (!s.pending.empty() && (oldest_ns == 0 || s.pending.begin()->second.entry.enqueued_ns < oldest_ns)) {
      oldest_ns = s.pending.begin()->second.entry.enqueued_ns;
    }
    if (oldest_ns != 0) out.oldest_age_ms = (shm::monotonic_ns() - oldest_ns) / 1'000'000;
    return true;
  }

 private:
  struct Record {
    std::string value;
    std::int64_t expires_ns = 0;
    std::uint64_t bytes = 0;  // cost() when stored, so erasing needs no value
  };
  using Records = std::unordered_map<std::string, Record>;
  struct Entry {
    std::string job_id;
    std::vector<EntryField> fields;
    std::int64_t enqueued_ns = 0;
  };
  struct Pending {
    Entry entry;
    std::int64_t delivered_ns = 0;
    std::uint64_t deliveries = 0;
  };
  struct Stream {
    std::map<std::uint64_t, Entry> waiting;    // by sequence number: oldest first
    std::map<std::uint64_t, Pending> pending;  // delivered, not yet answered
  };

  static StreamEntry delivery(const std::string& stream, std::uint64_t seq, const Entry& e, std::uint64_t deliveries) {
    return {stream, std::to_string(seq), e.fields, deliveries};
  }
  static std::uint64_t seq_of(std::string_view entry_id) {
    std::uint64_t seq = 0;
    std::from_chars(entry_id.data(), entry_id.data() + entry_id.size(), seq);
    return seq;
  }
  static std::uint64_t cost(const std::string& id, const std::string& value) noexcept {
    return id.size() + value.size() + kRecordOverheadBytes;
  }
  static std::int64_t deadline(std::int64_t now_ns, std::chrono::seconds ttl) noexcept {
    return now_ns + std::chrono::duration_cast<std::chrono::nanoseconds>(ttl).count();
  }

  // Precondition: mu_ held.
  StoreReply create_locked(const std::string& id, std::string value, std::chrono::seconds ttl, std::int64_t now_ns) {
    if (records_.contains(id)) return {StoreStatus::kExists, {}, "the job id is taken"};
    const std::uint64_t bytes = cost(id, value);
    if (records_.size() >= limits_.max_jobs) {
      return {StoreStatus::kFull, {}, fmt::format("the jobs store holds its maximum of {} jobs", limits_.max_jobs)};
    }
    if (bytes_ + bytes > limits_.max_bytes) {
      return {StoreStatus::kFull, {}, fmt::format("the jobs store holds {} of its {} bytes", bytes_, limits_.max_bytes)};
    }
    put(id, std::move(value), ttl, now_ns);
    return {};
  }

  // Precondition: mu_ held; no record for `id`.
  void put(const std::string& id, std::string value, std::chrono::seconds ttl, std::int64_t now_ns) {
    const std::uint64_t bytes = cost(id, value);
    const std::int64_t expires_ns = deadline(now_ns, ttl);
    expiry_.emplace(expires_ns, id);
    bytes_ += bytes;
    records_.emplace(id, Record{std::move(value), expires_ns, bytes});
  }

  // An answer is stored whatever the byte bound says: the job was accepted, and its caller is owed
  // it. The bound refuses new jobs while it is exceeded. Precondition: mu_ held.
  FinishOutcome settle(const EntryFinish& f, std::int64_t now_ns) {
    if (f.job_id.empty()) return FinishOutcome::kNoRecord;
    const auto it = records_.find(f.job_id);
    if (it == records_.end()) {
      if (f.has_record) return FinishOutcome::kDeleted;
      put(f.job_id, f.value, answer_ttl_, now_ns);
      return FinishOutcome::kStored;
    }
    if (it->second.value.empty() || it->second.value.front() != static_cast<char>(JobState::kPending)) {
      return FinishOutcome::kDuplicate;
    }
    erase(it);
    put(f.job_id, f.value, answer_ttl_, now_ns);
    return FinishOutcome::kStored;
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
  const std::chrono::seconds answer_ttl_;  // a finished job's record
  JobsCounters& counters_;  // borrowed; the service outlives the store
  mutable std::mutex mu_;
  std::condition_variable arrived_;  // an entry was queued
  Records records_;                                       // guarded by mu_
  std::set<std::pair<std::int64_t, std::string>> expiry_;  // guarded by mu_: (deadline, id)
  std::uint64_t bytes_ = 0;                               // guarded by mu_: cost() of every record
  std::unordered_map<std::string, Stream> streams_;       // guarded by mu_
  // guarded by mu_: each waiting job's stream and sequence number, so a DELETE takes it out
  std::unordered_map<std::string, std::pair<std::string, std::uint64_t>> queued_;
  std::uint64_t next_seq_ = 0;  // guarded by mu_
};

}  // namespace

EmbeddedJobs make_memory_jobs_store(const JobsStoreLimits& limits, std::chrono::seconds answer_ttl,
                                    JobsCounters& counters) {
  auto jobs = std::make_unique<MemoryJobs>(limits, answer_ttl, counters);
  JobsQueue* queue = jobs.get();
  return {std::move(jobs), queue};
}

}  // namespace batchd::http

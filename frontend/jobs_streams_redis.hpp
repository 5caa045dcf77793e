// The jobs queue on Redis Streams (docs/JOBS.md), as one consumer sees it: one hiredis connection,
// used by the jobs consumer's thread alone, under a connect and a command timeout, so a stuck Redis costs
// that thread a bounded wait and no event loop anything. Every call says whether Redis answered;
// after a failure the connection is dropped and made again (redis::Reconnecting) by ready().
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "frontend/jobs_queue.hpp"
#include "frontend/jobs_store.hpp"

struct redisReply;

namespace batchd::http {

class RedisJobsStreams final : public JobsQueue {
 public:
  // `consumer`: this node's name in the consumer groups; `ttl`: how long a record is kept; the
  // dead-letter and results streams are trimmed to about so many entries.
  RedisJobsStreams(const redis::RedisAddress& address, std::string consumer, std::chrono::seconds ttl,
                   std::uint64_t dead_letters_kept, std::uint64_t results_kept);
  ~RedisJobsStreams();
  RedisJobsStreams(const RedisJobsStreams&) = delete;
  RedisJobsStreams& operator=(const RedisJobsStreams&) = delete;

  bool ready() override;
  [[nodiscard]] const std::string& consumer() const noexcept override { return consumer_; }

  // The consumer group on a stream reads from its first entry, so jobs queued before any node
  // came are served.
  bool ensure_streams(std::span<const std::string> streams) override;
  bool read(std::span<const std::string> streams, std::size_t count, std::chrono::milliseconds block,
            std::vector<StreamEntry>& out) override;
  bool claim_idle(const std::string& stream, std::chrono::milliseconds idle, std::size_t max,
                  std::vector<StreamEntry>& out) override;
  bool touch(const std::string& stream, std::span<const std::string> entry_ids,
             std::vector<std::string>& lost) override;
  bool finish(std::span<const EntryFinish> finishes, std::vector<FinishOutcome>& outcomes) override;
  bool depth(const std::string& stream, StreamDepth& out) override;

 private:
  redisReply* command(std::span<const std::string> args);

  const std::string consumer_;
  redis::Reconnecting connection_;
  const std::chrono::seconds ttl_;
  const std::uint64_t dead_letters_kept_;
  const std::uint64_t results_kept_;
};

}  // namespace batchd::http

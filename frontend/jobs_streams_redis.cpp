#include "frontend/jobs_streams_redis.hpp"

#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "redis/redis_connect.hpp"
#include "shm/clock.hpp"

namespace batchd::http {

namespace {

// Stores the answer (first write wins: a record no longer pending is left alone, and a deleted
// job is not brought back unless its entry came without a record), dead-letters when there is a
// reason, then acknowledges and deletes the entry: all at once, so an entry is never acknowledged
// without its answer stored; an entry whose job another delivery answered (or was deleted) is not
// dead-lettered. A stored answer is also appended to the model's results stream when
// there is one, so it appears there once however often the entry was delivered. KEYS: record,
// stream, dead-letter stream, results stream. ARGV: value, ttl, entry id, record ("1", "0" or
// "none"), group, dead reason, deliveries, dead letters kept, consumer, results kept ("": no
// results stream), job id, then the dead letter's field, value pairs.
constexpr const char* kFinishScript = R"lua(
local outcome = 'none'
if ARGV[4] ~= 'none' then
  local v = redis.call('GET', KEYS[1])
  if v then
    if string.sub(v, 1, 1) == 'P' then
      redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
      outcome = 'stored'
    else
      outcome = 'duplicate'
    end
  elseif ARGV[4] == '0' then
    redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
    outcome = 'stored'
  else
    outcome = 'deleted'
  end
end
if outcome == 'stored' and ARGV[10] ~= '' then
  local states = {D = 'done', F = 'failed', X = 'expired'}
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*', 'id', ARGV[11],
             'status', states[string.sub(ARGV[1], 1, 1)] or 'failed', 'body', string.sub(ARGV[1], 2))
end
if ARGV[6] ~= '' and (outcome == 'stored' or outcome == 'none') then
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'stream', KEYS[2], 'entry', ARGV[3],
             'reason', ARGV[6], 'deliveries', ARGV[7], 'consumer', ARGV[9], unpack(ARGV, 12))
end
redis.call('XACK', KEYS[2], ARGV[5], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
return outcome
)lua";

using redis::Reply;
using redis::text_of;

// An entry reply: [id, [field, value, ...]] (the fields nil for an entry deleted meanwhile).
bool read_entry(const redisReply* r, const std::string& stream, StreamEntry& out) {
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING) {
    return false;
  }
  out.stream = stream;
  out.id = text_of(r->element[0]);
  const redisReply* fields = r->element[1];
  if (fields->type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i + 1 < fields->elements; i += 2) {
      out.fields.emplace_back(text_of(fields->element[i]), text_of(fields->element[i + 1]));
    }
  }
  return true;
}

}  // namespace

RedisJobsStreams::RedisJobsStreams(const redis::RedisAddress& address, std::string consumer, std::chrono::seconds ttl,
                                   std::uint64_t dead_letters_kept, std::uint64_t results_kept)
    : consumer_(std::move(consumer)), connection_(address, "batchd-http: jobs consumer " + consumer_), ttl_(ttl),
      dead_letters_kept_(dead_letters_kept), results_kept_(results_kept) {}

RedisJobsStreams::~RedisJobsStreams() = default;

bool RedisJobsStreams::ready() { return connection_.get() != nullptr; }

redisReply* RedisJobsStreams::command(std::span<const std::string> args) {
  redisContext* context = connection_.get();
  if (context == nullptr) return nullptr;
  redis::append_command(context, args);
  void* reply = nullptr;
  if (redisGetReply(context, &reply) != REDIS_OK) {
    connection_.drop(context->errstr);
    return nullptr;
  }
  return static_cast<redisReply*>(reply);
}

bool RedisJobsStreams::ensure_streams(std::span<const std::string> streams) {
  for (const std::string& stream : streams) {
    const std::string args[] = {"XGROUP", "CREATE", stream, std::string(kJobsGroup), "0", "MKSTREAM"};
    Reply reply(command(args));
    if (!reply) return false;
    if (reply->type == REDIS_REPLY_ERROR && !text_of(reply.get()).starts_with("BUSYGROUP")) {
      // Another type of key in its place, say: this stream alone is left out (tried again later).
      spdlog::warn("batchd-http: jobs consumer: XGROUP CREATE {}: {}", stream, text_of(reply.get()));
      return false;
    }
  }
  return true;
}

bool RedisJobsStreams::read(std::span<const std::string> streams, std::size_t count, std::chrono::milliseconds block,
                            std::vector<StreamEntry>& out) {
  if (streams.empty()) return true;
  std::vector<std::string> args = {"XREADGROUP", "GROUP", std::string(kJobsGroup), consumer_,
                                   "COUNT", std::to_string(std::max<std::size_t>(count, 1))};
  if (block.count() > 0) {
    args.emplace_back("BLOCK");
    args.push_back(std::to_string(block.count()));
  }
  args.emplace_back("STREAMS");
  args.insert(args.end(), streams.begin(), streams.end());
  for (std::size_t i = 0; i < streams.size(); ++i) args.emplace_back(">");
  Reply reply(command(args));
  if (!reply) return false;
  if (reply->type == REDIS_REPLY_NIL) return true;  // nothing came in time
  if (reply->type == REDIS_REPLY_ERROR) {
    const std::string error = text_of(reply.get());
    // A stream or group gone (deleted, or a Redis that lost its data): made again, read next time.
    if (error.starts_with("NOGROUP")) return ensure_streams(streams);
    connection_.drop("XREADGROUP: " + error);
    return false;
  }
  if (reply->type != REDIS_REPLY_ARRAY) return true;
  for (std::size_t s = 0; s < reply->elements; ++s) {
    const redisReply* pair = reply->element[s];
    if (pair->type != REDIS_REPLY_ARRAY || pair->elements != 2 || pair->element[1]->type != REDIS_REPLY_ARRAY) continue;
    const std::string stream = text_of(pair->element[0]);
    for (std::size_t e = 0; e < pair->element[1]->elements; ++e) {
      StreamEntry entry;
      if (read_entry(pair->element[1]->element[e], stream, entry)) out.push_back(std::move(entry));
    }
  }
  return true;
}

bool RedisJobsStreams::claim_idle(const std::string& stream, std::chrono::milliseconds idle, std::size_t max,
                                  std::vector<StreamEntry>& out) {
  const std::string min_idle = std::to_string(idle.count());
  const std::string pending_args[] = {"XPENDING", stream, std::string(kJobsGroup), "IDLE", min_idle, "-", "+",
                                      std::to_string(std::max<std::size_t>(max, 1))};
  Reply pending(command(pending_args));
  if (!pending) return false;
  if (pending->type != REDIS_REPLY_ARRAY || pending->elements == 0) return true;  // none, or no group yet
  std::vector<std::string> claim = {"XCLAIM", stream, std::string(kJobsGroup), consumer_, min_idle};
  std::vector<std::pair<std::string, std::uint64_t>> deliveries;
  for (std::size_t i = 0; i < pending->elements; ++i) {
    const redisReply* p = pending->element[i];
    if (p->type != REDIS_REPLY_ARRAY || p->elements < 4) continue;
    claim.push_back(text_of(p->element[0]));
    deliveries.emplace_back(claim.back(), static_cast<std::uint64_t>(p->element[3]->integer));
  }
  if (deliveries.empty()) return true;
  Reply claimed(command(claim));
  if (!claimed) return false;
  if (claimed->type != REDIS_REPLY_ARRAY) return true;
  for (std::size_t i = 0; i < claimed->elements; ++i) {
    StreamEntry entry;
    if (claimed->element[i]->type == REDIS_REPLY_NIL) continue;
    if (!read_entry(claimed->element[i], stream, entry)) continue;
    for (const auto& [id, count] : deliveries) {
      if (id == entry.id) entry.deliveries = count + 1;  // XCLAIM counted this delivery
    }
    out.push_back(std::move(entry));
  }
  return true;
}

bool RedisJobsStreams::touch(const std::string& stream, std::span<const std::string> entry_ids,
                             std::vector<std::string>& lost) {
  if (entry_ids.empty()) return true;
  // Only entries still this consumer's: XCLAIM would take another's back (one that claimed them
  // while this node stalled), and the two would then pass them to and fro.
  const std::string pending_args[] = {"XPENDING", stream, std::string(kJobsGroup), "IDLE", "0", "-", "+",
                                      std::to_string(entry_ids.size() * 2 + 64), consumer_};
  Reply pending(command(pending_args));
  if (!pending) return false;
  std::vector<std::string> ours;
  if (pending->type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < pending->elements; ++i) {
      const redisReply* p = pending->element[i];
      if (p->type == REDIS_REPLY_ARRAY && p->elements >= 1) ours.push_back(text_of(p->element[0]));
    }
  }
  std::vector<std::string> args = {"XCLAIM", stream, std::string(kJobsGroup), consumer_, "0"};
  for (const std::string& id : entry_ids) {
    if (std::find(ours.begin(), ours.end(), id) != ours.end()) {
      args.push_back(id);
    } else {
      lost.push_back(id);
    }
  }
  if (args.size() == 5) return true;
  args.emplace_back("JUSTID");  // the idle time reset, the delivery count left alone
  Reply reply(command(args));
  return static_cast<bool>(reply);
}

bool RedisJobsStreams::finish(std::span<const EntryFinish> finishes, std::vector<FinishOutcome>& outcomes) {
  outcomes.clear();
  if (finishes.empty()) return true;
  redisContext* context = connection_.get();
  if (context == nullptr) return false;
  const std::string ttl = std::to_string(ttl_.count());
  const std::string kept = std::to_string(dead_letters_kept_);
  const std::string results_kept = std::to_string(results_kept_);
  for (const EntryFinish& f : finishes) {
    const bool publish = !f.results_stream.empty() && !f.job_id.empty();
    std::vector<std::string> args = {"EVAL", kFinishScript, "4", job_record_key(f.job_id), f.stream,
                                     std::string(kJobsDeadStream), publish ? f.results_stream : f.stream, f.value,
                                     ttl, f.entry_id, f.job_id.empty() ? "none" : (f.has_record ? "1" : "0"),
                                     std::string(kJobsGroup), f.dead_reason, std::to_string(f.deliveries), kept,
                                     consumer_, publish ? results_kept : std::string(), f.job_id};
    if (!f.dead_reason.empty()) {
      for (const auto& [name, value] : f.fields) {
        // The dead letter's own fields come first; a producer's field of the same name is kept
        // under another.
        const bool ours = name == "stream" || name == "entry" || name == "reason" || name == "deliveries" ||
                          name == "consumer";
        args.push_back(ours ? "field_" + name : name);
        args.push_back(value);
      }
    }
    redis::append_command(context, args);
  }
  for (std::size_t i = 0; i < finishes.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) != REDIS_OK) {
      connection_.drop(context->errstr);
      outcomes.clear();
      return false;
    }
    Reply reply(static_cast<redisReply*>(raw));
    const std::string text = text_of(reply.get());
    if (reply->type == REDIS_REPLY_ERROR) {  // that entry alone; the others' replies are read on
      spdlog::warn("batchd-http: jobs consumer: finishing entry {} of {}: {}", finishes[i].entry_id,
                   finishes[i].stream, text);
      outcomes.push_back(FinishOutcome::kFailed);
      continue;
    }
    outcomes.push_back(text == "stored"      ? FinishOutcome::kStored
                       : text == "duplicate" ? FinishOutcome::kDuplicate
                       : text == "deleted"   ? FinishOutcome::kDeleted
                                             : FinishOutcome::kNoRecord);
  }
  return true;
}

bool RedisJobsStreams::depth(const std::string& stream, StreamDepth& out) {
  out = {};
  const std::string len_args[] = {"XLEN", stream};
  Reply len(command(len_args));
  if (!len) return false;
  if (len->type == REDIS_REPLY_INTEGER) out.entries = static_cast<std::uint64_t>(len->integer);
  const std::string pending_args[] = {"XPENDING", stream, std::string(kJobsGroup)};
  Reply pending(command(pending_args));
  if (!pending) return false;
  if (pending->type == REDIS_REPLY_ARRAY && pending->elements >= 1 && pending->element[0]->type == REDIS_REPLY_INTEGER) {
    out.pending = static_cast<std::uint64_t>(pending->element[0]->integer);
  }
  if (out.entries == 0) return true;
  const std::string first_args[] = {"XRANGE", stream, "-", "+", "COUNT", "1"};
  Reply first(command(first_args));
  if (!first) return false;
  if (first->type == REDIS_REPLY_ARRAY && first->elements == 1) {
    StreamEntry entry;
    if (read_entry(first->element[0], stream, entry)) out.oldest_age_ms = redis::entry_age_ms(entry.id);
  }
  return true;
}

}  // namespace batchd::http

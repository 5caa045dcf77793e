#include "tools/batchctl_jobs.hpp"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "redis/jobs_keys.hpp"
#include "redis/redis_connect.hpp"
#include "text/json_escape.hpp"

namespace batchd::jobsctl {

namespace {

// A requeued job's pending record lives this long, like a job submitted with the longest
// default deadline and TTL.
constexpr int kRequeuedRecordTtlS = 86400;
constexpr int kRedeliveriesLooked = 1000;  // pending entries read per stream to count redeliveries

// The dead letter back to the stream it came from, without the dead letter's own fields (a
// producer's field of the same name, kept as field_NAME, gets its name back) and without its
// deadline (an operator who requeues wants it run); its job's record pending again, unless the
// job was answered meanwhile (another delivery): then nothing is done. KEYS: the
// dead-letter stream. ARGV: entry id, record TTL, record prefix, stream prefix.
constexpr const char* kRequeueScript = R"lua(
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then return redis.error_reply('no dead letter ' .. ARGV[1]) end
local f = found[1][2]
local ours = {stream = true, entry = true, reason = true, deliveries = true, consumer = true}
local stream, id, fields = nil, nil, {}
for i = 1, #f, 2 do
  local k, v = f[i], f[i + 1]
  if k == 'stream' then
    stream = v
  elseif not ours[k] then
    if string.sub(k, 1, 6) == 'field_' and ours[string.sub(k, 7)] then k = string.sub(k, 7) end
    if k == 'id' then id = v end
    if k ~= 'record' and k ~= 'deadline_ms' then
      table.insert(fields, k)
      table.insert(fields, v)
    end
  end
end
if stream == nil or string.sub(stream, 1, #ARGV[4]) ~= ARGV[4] then
  return redis.error_reply('dead letter ' .. ARGV[1] .. ' names no jobs stream')
end
if id ~= nil and #id == 32 and string.match(id, '^[0-9a-f]+$') then
  local record = redis.call('GET', ARGV[3] .. id)
  if record and string.sub(record, 1, 1) == 'D' then
    return redis.error_reply('job ' .. id .. ' of dead letter ' .. ARGV[1] .. ' is answered already: drop the letter')
  end
  redis.call('SET', ARGV[3] .. id, 'P{"id":"' .. id .. '","status":"pending"}', 'EX', ARGV[2])
  table.insert(fields, 'record')
  table.insert(fields, '1')
end
if #fields == 0 then return redis.error_reply('dead letter ' .. ARGV[1] .. ' has no fields to requeue') end
local entry = redis.call('XADD', stream, '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[1])
return {stream, entry}
)lua";

using redis::Reply;
using redis::entry_age_ms;
using redis::text_of;

class Redis {
 public:
  explicit Redis(const std::string& url) {
    std::string failure;
    context_ = redis::connect_redis(redis::parse_redis_url(url), &failure);
    if (context_ == nullptr) throw std::runtime_error("cannot reach Redis at " + url + ": " + failure);
  }
  ~Redis() { redisFree(context_); }
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // The reply; throws on a lost connection or an error reply.
  Reply run(const std::vector<std::string>& args) {
    redis::append_command(context_, args);
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK) throw std::runtime_error(std::string("Redis: ") + context_->errstr);
    Reply reply(static_cast<redisReply*>(raw));
    if (reply->type == REDIS_REPLY_ERROR) throw std::runtime_error(args.front() + ": " + text_of(reply.get()));
    return reply;
  }

 private:
  redisContext* context_ = nullptr;
};

struct StreamReport {
  std::string key, model, priority;
  std::uint64_t entries = 0, pending = 0, redelivered = 0;
  std::int64_t oldest_age_ms = 0;
  std::map<std::string, std::uint64_t> consumers;  // pending per consumer
};

std::vector<std::string> job_streams(Redis& r) {
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    Reply reply = r.run({"SCAN", cursor, "MATCH", std::string(redis::kJobsStreamPrefix) + "*", "COUNT", "1000",
                         "TYPE", "stream"});
    cursor = text_of(reply->element[0]);
    for (std::size_t i = 0; i < reply->element[1]->elements; ++i) {
      std::string key = text_of(reply->element[1]->element[i]);
      if (key != redis::kJobsDeadStream) keys.push_back(std::move(key));
    }
  } while (cursor != "0");
  std::sort(keys.begin(), keys.end());
  return keys;
}

StreamReport report_stream(Redis& r, const std::string& key) {
  StreamReport s;
  s.key = key;
  const std::string_view name = std::string_view(key).substr(redis::kJobsStreamPrefix.size());
  const std::size_t colon = name.rfind(':');
  s.model = std::string(name.substr(0, colon));
  s.priority = colon == std::string_view::npos ? std::string() : std::string(name.substr(colon + 1));
  s.entries = static_cast<std::uint64_t>(r.run({"XLEN", key})->integer);
  const std::string group(redis::kJobsGroup);
  try {
    Reply summary = r.run({"XPENDING", key, group});
    s.pending = static_cast<std::uint64_t>(summary->element[0]->integer);
    if (summary->elements >= 4 && summary->element[3]->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < summary->element[3]->elements; ++i) {
        const redisReply* c = summary->element[3]->element[i];
        s.consumers[text_of(c->element[0])] = std::stoull(text_of(c->element[1]));
      }
    }
    Reply detail = r.run({"XPENDING", key, group, "-", "+", std::to_string(kRedeliveriesLooked)});
    for (std::size_t i = 0; i < detail->elements; ++i) {
      if (detail->element[i]->element[3]->integer > 1) ++s.redelivered;
    }
  } catch (const std::runtime_error&) {
    // No group yet: no node has read this stream.
  }
  Reply first = r.run({"XRANGE", key, "-", "+", "COUNT", "1"});
  if (first->elements == 1) s.oldest_age_ms = entry_age_ms(text_of(first->element[0]->element[0]));
  return s;
}

int overview(Redis& r, bool json) {
  std::vector<StreamReport> streams;
  for (const std::string& key : job_streams(r)) streams.push_back(report_stream(r, key));
  const auto dead = static_cast<std::uint64_t>(r.run({"XLEN", std::string(redis::kJobsDeadStream)})->integer);
  if (json) {
    std::string out = "{\"streams\":[";
    for (std::size_t i = 0; i < streams.size(); ++i) {
      const StreamReport& s = streams[i];
      out += i == 0 ? "{" : ",{";
      out += "\"model\":\"";
      text::append_json_escaped_lossy(s.model, out);
      out += fmt::format(R"(","priority":"{}","entries":{},"waiting":{},"pending":{},"oldest_age_ms":{},)"
                         R"("redelivered":{},"consumers":{{)",
                         s.priority, s.entries, s.entries - std::min(s.entries, s.pending), s.pending,
                         s.oldest_age_ms, s.redelivered);
      bool first = true;
      for (const auto& [name, count] : s.consumers) {
        out += first ? "\"" : ",\"";
        text::append_json_escaped_lossy(name, out);
        out += fmt::format("\":{}", count);
        first = false;
      }
      out += "}}";
    }
    out += fmt::format("],\"dead_letters\":{}}}\n", dead);
    std::cout << out;
    return 0;
  }
  std::cout << fmt::format("{:<24} {:<7} {:>9} {:>9} {:>10} {:>12}\n", "model", "class", "waiting", "pending",
                           "oldest", "redelivered");
  for (const StreamReport& s : streams) {
    std::cout << fmt::format("{:<24} {:<7} {:>9} {:>9} {:>8.1f} s {:>12}\n", s.model, s.priority,
                             s.entries - std::min(s.entries, s.pending), s.pending,
                             static_cast<double>(s.oldest_age_ms) / 1000.0, s.redelivered);
    for (const auto& [name, count] : s.consumers) std::cout << fmt::format("  pending on {}: {}\n", name, count);
  }
  if (streams.empty()) std::cout << "(no job streams yet)\n";
  std::cout << fmt::format("dead letters: {}{}\n", dead, dead > 0 ? " (batchctl jobs --dead lists them)" : "");
  return 0;
}

int list_dead(Redis& r, int count, bool json) {
  Reply entries = r.run({"XREVRANGE", std::string(redis::kJobsDeadStream), "+", "-", "COUNT", std::to_string(count)});
  std::string out = json ? "[" : "";
  for (std::size_t i = entries->elements; i-- > 0;) {  // oldest first
    const redisReply* e = entries->element[i];
    const std::string entry = text_of(e->element[0]);
    std::map<std::string, std::string> f;
    for (std::size_t k = 0; k + 1 < e->element[1]->elements; k += 2) {
      f.emplace(text_of(e->element[1]->element[k]), text_of(e->element[1]->element[k + 1]));
    }
    if (json) {
      out += out.size() == 1 ? "{" : ",{";
      bool first = true;
      for (const auto& [name, value] : std::map<std::string, std::string>{
               {"dead_letter", entry}, {"stream", f["stream"]}, {"entry", f["entry"]}, {"reason", f["reason"]},
               {"deliveries", f["deliveries"]}, {"consumer", f["consumer"]}, {"id", f["id"]}}) {
        out += first ? "\"" : ",\"";
        out += name + "\":\"";
        text::append_json_escaped_lossy(value, out);
        out += "\"";
        first = false;
      }
      out += "}";
    } else {
      out += fmt::format("{}  {:.0f} s ago  {}  job {}  delivered {}\n  {}\n", entry,
                         static_cast<double>(entry_age_ms(entry)) / 1000.0, f["stream"],
                         f["id"].empty() ? "(none)" : f["id"], f["deliveries"], f["reason"]);
    }
  }
  if (json) out += "]\n";
  if (!json && entries->elements == 0) out = "(no dead letters)\n";
  std::cout << out;
  return 0;
}

}  // namespace

int run(const Options& options) {
  try {
    Redis r(options.redis_url);
    if (!options.requeue.empty()) {
      Reply done = r.run({"EVAL", kRequeueScript, "1", std::string(redis::kJobsDeadStream), options.requeue,
                          std::to_string(kRequeuedRecordTtlS), std::string(redis::kJobRecordPrefix),
                          std::string(redis::kJobsStreamPrefix)});
      std::cout << fmt::format("requeued dead letter {} as entry {} of {}\n", options.requeue,
                               text_of(done->element[1]), text_of(done->element[0]));
      return 0;
    }
    if (!options.drop.empty()) {
      if (r.run({"XDEL", std::string(redis::kJobsDeadStream), options.drop})->integer == 0) {
        throw std::runtime_error("no dead letter " + options.drop);
      }
      std::cout << fmt::format("dropped dead letter {}\n", options.drop);
      return 0;
    }
    if (options.dead >= 0) return list_dead(r, options.dead, options.json);
    return overview(r, options.json);
  } catch (const std::exception& e) {
    std::cerr << "batchctl jobs: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace batchd::jobsctl

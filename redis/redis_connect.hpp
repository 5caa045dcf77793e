// How batchd reaches Redis (the jobs store and queue, docs/JOBS.md): an address from a
// redis://HOST[:PORT][/DB] URL, and one way to open a hiredis connection to it, with a connect and
// a command timeout (so a stuck Redis costs the thread that waits a bounded time) and the database
// the URL names.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>


namespace batchd::redis {

// Where Redis is: redis://HOST[:PORT][/DB] (port 6379, database 0 by default).
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
};
// Throws std::invalid_argument with the reason for anything else (credentials included: not
// supported in the URL).
RedisAddress parse_redis_url(std::string_view url);

inline constexpr timeval kRedisConnectTimeout{0, 500'000};
inline constexpr timeval kRedisCommandTimeout{1, 0};

// The connection, or nullptr with *failure saying why.
redisContext* connect_redis(const RedisAddress& address, std::string* failure);

// One thread's connection that is made again by itself: after a failed connect the next waits a
// growing pause (50 ms doubling to 2 s), each distinct failure logged once; after a dropped
// connection the next get() tries at once, a dropped connection being worth one immediate retry.
class Reconnecting {
 public:
  // `who`: what talks to Redis, for the log ("batchd-http: jobs store").
  Reconnecting(const RedisAddress& address, std::string who);
  ~Reconnecting();
  Reconnecting(const Reconnecting&) = delete;
  Reconnecting& operator=(const Reconnecting&) = delete;

  // The connection, or nullptr while Redis cannot be reached (connects if the pause is over).
  redisContext* get();
  // Closes it after a failure (`why`, for the log and last_error()).
  void drop(const std::string& why);
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }  // host:port

 private:
  const RedisAddress address_;
  const std::string who_;
  const std::string name_;
  redisContext* context_ = nullptr;
  std::int64_t backoff_ns_ = 0;
  std::int64_t next_attempt_ns_ = 0;
  std::string last_error_;
};

// A reply, freed with it.
struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
// A reply's string (a bulk, status or error reply's bytes; "" for any other, or none).
std::string text_of(const redisReply* reply);

// A stream entry's age in milliseconds, from the Unix time its id begins with (0: none).
std::int64_t entry_age_ms(std::string_view entry_id);

// Appends one command, each argument binary-safe, to the connection's pipeline.
void append_command(redisContext* context, std::span<const std::string> args);

}  // namespace batchd::redis

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
// After a failed connect, the next waits this long, doubling up to the most.
inline constexpr std::int64_t kRedisFirstBackoffNs = 50'000'000;
inline constexpr std::int64_t kRedisMaxBackoffNs = 2'000'000'000;

// The connection, or nullptr with *failure saying why.
redisContext* connect_redis(const RedisAddress& address, std::string* failure);

// A reply, freed with it.
struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
// A reply's string (a bulk, status or error reply's bytes; "" for any other, or none).
std::string text_of(const redisReply* reply);

// Appends one command, each argument binary-safe, to the connection's pipeline.
void append_command(redisContext* context, std::span<const std::string> args);

}  // namespace batchd::redis

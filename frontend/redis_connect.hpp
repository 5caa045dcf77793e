// One way to open a hiredis connection for the jobs store and the jobs consumer: a connect and a
// command timeout (so a stuck Redis costs the thread that waits a bounded time), and the database
// the URL names.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <span>
#include <string>

#include "frontend/jobs_store.hpp"

namespace batchd::http {

inline constexpr timeval kRedisConnectTimeout{0, 500'000};
inline constexpr timeval kRedisCommandTimeout{1, 0};
// After a failed connect, the next waits this long, doubling up to the most.
inline constexpr std::int64_t kRedisFirstBackoffNs = 50'000'000;
inline constexpr std::int64_t kRedisMaxBackoffNs = 2'000'000'000;

// The connection, or nullptr with *failure saying why.
redisContext* connect_redis(const RedisAddress& address, std::string* failure);

// Appends one command, each argument binary-safe, to the connection's pipeline.
void append_command(redisContext* context, std::span<const std::string> args);

}  // namespace batchd::http

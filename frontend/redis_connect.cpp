#include "frontend/redis_connect.hpp"

#include <vector>

namespace batchd::http {

namespace {

std::string select_db(redisContext* c, int db) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SELECT %d", db));
  if (reply == nullptr) return c->errstr;
  std::string failure;
  if (reply->type == REDIS_REPLY_ERROR) failure = "SELECT " + std::to_string(db) + ": " + reply->str;
  freeReplyObject(reply);
  return failure;
}

}  // namespace

redisContext* connect_redis(const RedisAddress& address, std::string* failure) {
  redisContext* c = redisConnectWithTimeout(address.host.c_str(), address.port, kRedisConnectTimeout);
  if (c == nullptr) {
    *failure = "out of memory";
  } else if (c->err != 0) {
    *failure = c->errstr;
  } else if (redisSetTimeout(c, kRedisCommandTimeout) != REDIS_OK) {
    *failure = c->errstr;
  } else if (address.db != 0) {
    *failure = select_db(c, address.db);
  }
  if (failure->empty()) return c;
  if (c != nullptr) redisFree(c);
  return nullptr;
}

void append_command(redisContext* context, std::span<const std::string> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  argv.reserve(args.size());
  lengths.reserve(args.size());
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data());
}

}  // namespace batchd::http

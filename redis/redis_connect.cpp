#include "redis/redis_connect.hpp"

#include "shm/clock.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <stdexcept>
#include <vector>

namespace batchd::redis {

namespace {

constexpr std::int64_t kFirstBackoffNs = 50'000'000;
constexpr std::int64_t kMaxBackoffNs = 2'000'000'000;

int parse_port_or_db(std::string_view text, int max, std::string_view what, std::string_view url) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > max) {
    throw std::invalid_argument("Redis URL " + std::string(url) + ": bad " + std::string(what));
  }
  return value;
}

std::string select_db(redisContext* c, int db) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SELECT %d", db));
  if (reply == nullptr) return c->errstr;
  std::string failure;
  if (reply->type == REDIS_REPLY_ERROR) failure = "SELECT " + std::to_string(db) + ": " + reply->str;
  freeReplyObject(reply);
  return failure;
}

}  // namespace

RedisAddress parse_redis_url(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (!url.starts_with(kScheme)) {
    throw std::invalid_argument("Redis URL " + std::string(url) + ": expected redis://HOST[:PORT][/DB]");
  }
  std::string_view rest = url.substr(kScheme.size());
  RedisAddress address;
  if (const std::size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) address.db = parse_port_or_db(db, 1 << 20, "database number", url);
    rest = rest.substr(0, slash);
  }
  if (rest.find('@') != std::string_view::npos) {
    throw std::invalid_argument("Redis URL " + std::string(url) + ": credentials in the URL are not supported");
  }
  // [v6 address]:port, host:port, or host alone.
  std::string_view host = rest;
  std::string_view port;
  if (rest.starts_with('[')) {
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("Redis URL " + std::string(url) + ": bad host");
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const std::size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) throw std::invalid_argument("Redis URL " + std::string(url) + ": no host");
  address.host = std::string(host);
  if (!port.empty()) address.port = parse_port_or_db(port, 65535, "port", url);
  return address;
}

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

Reconnecting::Reconnecting(const RedisAddress& address, std::string who)
    : address_(address), who_(std::move(who)), name_(address.host + ":" + std::to_string(address.port)) {}

Reconnecting::~Reconnecting() {
  if (context_ != nullptr) redisFree(context_);
}

redisContext* Reconnecting::get() {
  if (context_ != nullptr) return context_;
  if (shm::monotonic_ns() < next_attempt_ns_) return nullptr;
  std::string failure;
  context_ = connect_redis(address_, &failure);
  if (context_ == nullptr) {
    backoff_ns_ = backoff_ns_ == 0 ? kFirstBackoffNs : std::min(2 * backoff_ns_, kMaxBackoffNs);
    next_attempt_ns_ = shm::monotonic_ns() + backoff_ns_;
    if (last_error_ != failure) spdlog::warn("{}: cannot reach Redis at {}: {}", who_, name_, failure);
    last_error_ = failure;
    return nullptr;
  }
  backoff_ns_ = 0;
  last_error_.clear();
  spdlog::info("{}: connected to Redis at {} (db {})", who_, name_, address_.db);
  return context_;
}

void Reconnecting::drop(const std::string& why) {
  last_error_ = why;
  spdlog::warn("{}: lost Redis at {}: {}", who_, name_, why);
  if (context_ != nullptr) redisFree(context_);
  context_ = nullptr;
  next_attempt_ns_ = 0;
}

std::int64_t entry_age_ms(std::string_view entry_id) {
  std::int64_t ms = 0;
  std::from_chars(entry_id.data(), entry_id.data() + entry_id.size(), ms);
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  return ms == 0 ? 0 : std::max<std::int64_t>(0, now - ms);
}

std::string text_of(const redisReply* reply) {
  return reply != nullptr && reply->str != nullptr ? std::string(reply->str, reply->len) : std::string();
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

}  // namespace batchd::redis

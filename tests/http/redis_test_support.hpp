// Shared by the tests that keep jobs in Redis: a redis-server of the test's own, and a plain
// client to look into it (or write into its streams as another service would).
#pragma once

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/http/http_test_support.hpp"

namespace batchd::test {

// True once something on 127.0.0.1:port answers PING with +PONG.
inline bool redis_answers(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::send(fd, "PING\r\n", 6, MSG_NOSIGNAL) == 6) {
    char buf[16] = {};
    ok = ::recv(fd, buf, sizeof(buf) - 1, 0) > 0 && std::string_view(buf).starts_with("+PONG");
  }
  ::close(fd);
  return ok;
}

// A redis-server of this test's own: loopback, a free port (kept across restarts), its files in
// the test's temporary directory; without persistence, or with an append-only file synced at
// every write (appendfsync always: what is acknowledged survives a crash).
class RedisServer {
 public:
  enum class Persistence { kNone, kAofAlways };
  explicit RedisServer(Persistence persistence = Persistence::kNone)
      : port_(free_port()), dir_(std::filesystem::path(temp_socket_path("redis")).parent_path()),
        persistence_(persistence) {
    start();
  }
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  void start() {
    const char* bin = std::getenv("BATCHD_REDIS_SERVER");
    const bool installed = bin != nullptr && *bin != '\0';
    REQUIRE_MESSAGE(installed, "redis-server is not installed (scripts/setup.sh installs it)");
    std::vector<std::string> argv = {bin, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                     "--dir", dir_, "--protected-mode", "no", "--loglevel", "warning",
                                     "--daemonize", "no"};
    if (persistence_ == Persistence::kAofAlways) {
      argv.insert(argv.end(), {"--appendonly", "yes", "--appendfsync", "always"});
    } else {
      argv.insert(argv.end(), {"--appendonly", "no"});
    }
    pid_ = spawn(argv);
    REQUIRE_MESSAGE(eventually([&] { return redis_answers(port_); }, std::chrono::seconds(10)),
                    "redis-server did not start");
  }

  void stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);  // in case it was paused
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  void pause() const { ::kill(pid_, SIGSTOP); }
  void resume() const { ::kill(pid_, SIGCONT); }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  std::uint16_t port_;
  std::string dir_;
  Persistence persistence_;
  pid_t pid_ = -1;
};

// A reply, flattened: an array's strings and numbers in order (nested arrays flattened too), or
// one string; nil and errors as flags.
struct RedisValue {
  bool nil = false;
  std::string error;
  long long integer = 0;
  std::vector<std::string> strings;
};

// A plain synchronous client, for looking into Redis from a test.
class RedisCli {
 public:
  explicit RedisCli(std::uint16_t port) : context_(redisConnect("127.0.0.1", port)) {
    REQUIRE_MESSAGE((context_ != nullptr && context_->err == 0), "cannot connect to the test's redis-server");
  }
  ~RedisCli() { redisFree(context_); }
  RedisCli(const RedisCli&) = delete;
  RedisCli& operator=(const RedisCli&) = delete;

  RedisValue run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
    RedisValue value;
    REQUIRE_MESSAGE(reply != nullptr, "Redis did not answer " << args.front());
    flatten(reply, value);
    freeReplyObject(reply);
    return value;
  }

 private:
  static void flatten(const redisReply* r, RedisValue& out) {
    switch (r->type) {
      case REDIS_REPLY_NIL: out.nil = true; break;
      case REDIS_REPLY_ERROR: out.error.assign(r->str, r->len); break;
      case REDIS_REPLY_INTEGER:
        out.integer = r->integer;
        out.strings.push_back(std::to_string(r->integer));
        break;
      case REDIS_REPLY_ARRAY:
        for (std::size_t i = 0; i < r->elements; ++i) flatten(r->element[i], out);
        break;
      default: out.strings.emplace_back(r->str, r->len); break;
    }
  }
  redisContext* context_;
};

}  // namespace batchd::test

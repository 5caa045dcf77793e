#include "grpc_frontend/daemon_pool.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <system_error>

namespace batchd::grpcfront {

namespace {

// Between failed attempts: short, so a restarted daemon is found quickly, but not a busy loop.
constexpr int kRetryPauseMs = 200;
// The client finds deadlines passed when polled; answers wake it sooner through the eventfd.
constexpr int kTickMs = 5;

}  // namespace

DaemonPool::DaemonPool(const ClientOptions& options, unsigned clients) : options_(options) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  for (unsigned i = 0; i < clients; ++i) members_.push_back(std::make_unique<Member>());
  for (auto& member : members_) {
    Member* m = member.get();
    m->thread = std::thread([this, m] { run(*m); });
  }
}

DaemonPool::~DaemonPool() {
  stop();
  ::close(wake_fd_);
}

void DaemonPool::stop() {
  if (stop_.exchange(true)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  for (auto& member : members_) {
    if (member->thread.joinable()) member->thread.join();
  }
}

Client* DaemonPool::pick() noexcept {
  const unsigned count = static_cast<unsigned>(members_.size());
  const unsigned first = next_.fetch_add(1, std::memory_order_relaxed);
  for (unsigned i = 0; i < count; ++i) {
    Client* client = members_[(first + i) % count]->client.load(std::memory_order_acquire);
    if (client != nullptr) return client;
  }
  return nullptr;
}

std::optional<NotReady> DaemonPool::not_ready(std::uint64_t max_queue) {
  for (auto& member : members_) {
    Client* client = member->client.load(std::memory_order_acquire);
    if (client == nullptr) {
      std::lock_guard lock(member->mu);
      return NotReady{"daemon_unavailable", "not attached to the batchd daemon: " + member->last_error};
    }
    if (auto why = daemon_not_ready(*client, max_queue)) return why;
  }
  return std::nullopt;
}

void DaemonPool::run(Member& member) {
  if (!attach(member)) return;
  pump(*member.owned);
}

bool DaemonPool::attach(Member& member) {
  bool warned = false;
  while (!stop_.load(std::memory_order_acquire)) {
    Error error;
    std::unique_ptr<Client> client = Client::connect(options_, &error);
    if (client) {
      spdlog::info("batchd-grpc: attached to the daemon ({} request slots)", client->slot_count());
      member.owned = std::move(client);
      member.client.store(member.owned.get(), std::memory_order_release);
      return true;
    }
    {
      std::lock_guard lock(member.mu);
      member.last_error = error.message;
    }
    if (!warned) spdlog::warn("batchd-grpc: cannot attach to the daemon yet: {}", error.message);
    warned = true;
    pollfd wake{wake_fd_, POLLIN, 0};
    ::poll(&wake, 1, kRetryPauseMs);  // stop() ends the pause early
  }
  return false;
}

// The client re-attaches by itself when the daemon restarts and keeps what it owes meanwhile, so
// this loop only ends at stop().
void DaemonPool::pump(Client& client) {
  pollfd fds[2] = {{client.event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stop_.load(std::memory_order_acquire)) {
    ::poll(fds, 2, kTickMs);
    client.poll();
  }
}

}  // namespace batchd::grpcfront

#include "frontend/daemon_link.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

namespace batchd::http {

namespace {

// Between failed attempts: short, so a restarted daemon is found quickly, but not a busy loop.
constexpr auto kRetryPause = std::chrono::milliseconds(200);

}  // namespace

DaemonLink::DaemonLink(ClientOptions options, int wake_fd) : options_(std::move(options)), wake_fd_(wake_fd) {
  last_error_ = "not attached yet";
  start_connector();
}

DaemonLink::~DaemonLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (connector_.joinable()) connector_.join();  // at most one connect timeout away
}

void DaemonLink::start_connector() {
  if (connector_.joinable()) connector_.join();  // the previous one has finished: it attached
  connector_ = std::thread([this] { connect_until_attached(); });
}

void DaemonLink::connect_until_attached() {
  bool warned = false;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    Error error;
    std::unique_ptr<Client> client = Client::connect(options_, &error);
    std::unique_lock lock(mu_);
    if (client) {
      attached_ = std::move(client);
      lock.unlock();
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
      return;
    }
    last_error_ = error.message;
    if (!warned) spdlog::warn("batchd-http: cannot attach to the daemon yet: {}", error.message);
    warned = true;
    if (stop_cv_.wait_for(lock, kRetryPause, [this] { return stop_; })) return;
  }
}

bool DaemonLink::adopt() {
  std::unique_ptr<Client> fresh;
  {
    std::lock_guard lock(mu_);
    fresh = std::move(attached_);
  }
  if (!fresh) return false;
  client_ = std::move(fresh);
  spdlog::info("batchd-http: attached to the daemon ({} request slots)", client_->slot_count());
  return true;
}

std::string DaemonLink::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

}  // namespace batchd::http

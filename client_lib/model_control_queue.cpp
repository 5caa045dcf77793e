#include "client_lib/model_control_queue.hpp"

namespace batchd {

ModelControlQueue::ModelControlQueue(ClientOptions options, std::chrono::milliseconds timeout)
    : options_(std::move(options)), timeout_(timeout), thread_([this] { run(); }) {}

ModelControlQueue::~ModelControlQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool ModelControlQueue::submit(std::string model, ModelAction action, Done done) {
  {
    std::lock_guard lock(mu_);
    if (calls_.size() >= kMaxQueued) return false;
    calls_.push_back({std::move(model), action, std::move(done)});
  }
  cv_.notify_one();
  return true;
}

void ModelControlQueue::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !calls_.empty(); });
    if (stopping_) return;
    Call call = std::move(calls_.front());
    calls_.pop_front();
    lock.unlock();
    Error error;
    std::optional<std::string> account = control_model(options_, call.model, call.action, timeout_, &error);
    call.done(std::move(account), error);
    lock.lock();
  }
}

}  // namespace batchd

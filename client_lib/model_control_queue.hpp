// Model control (control_model) off the caller's thread: the front-ends' event loops and gRPC
// handlers must not wait the seconds an unload or a load takes. One thread runs the calls in
// turn; a bounded queue refuses the rest, so a caller that floods the route costs itself.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "client_lib/client.hpp"

namespace batchd {

class ModelControlQueue {
 public:
  // The daemon's account of the change, or why there is none.
  using Done = std::function<void(std::optional<std::string> account, const Error& error)>;
  static constexpr std::size_t kMaxQueued = 16;

  ModelControlQueue(ClientOptions options, std::chrono::milliseconds timeout);
  // Waits for the call running now; the queued ones are dropped unanswered (their callers are
  // going away too).
  ~ModelControlQueue();
  ModelControlQueue(const ModelControlQueue&) = delete;
  ModelControlQueue& operator=(const ModelControlQueue&) = delete;

  // Any thread. `done` runs on the queue's thread; false (and `done` is never called) when the
  // queue is full.
  bool submit(std::string model, ModelAction action, Done done);

 private:
  struct Call {
    std::string model;
    ModelAction action;
    Done done;
  };
  void run();

  const ClientOptions options_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Call> calls_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::thread thread_;
};

}  // namespace batchd

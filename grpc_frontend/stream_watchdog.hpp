// Cancels the streams whose client has stopped taking answers. HTTP/2 flow control holds a
// stream's write for as long as its client does not read; without this, a client that sends and
// never reads would keep its stream, the requests it holds and their answers for good.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace batchd::grpcfront {

class Watched {
 public:
  // Cancels the stream if the write in progress began before `stalled_since_ns` (monotonic).
  virtual void cancel_if_stalled(std::int64_t stalled_since_ns) = 0;

 protected:
  ~Watched() = default;
};

class StreamWatchdog {
 public:
  explicit StreamWatchdog(std::chrono::milliseconds write_timeout);
  ~StreamWatchdog();
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // A stream from its start to its end (remove() before it is deleted; never while holding a lock
  // that cancel_if_stalled takes).
  void add(Watched* stream);
  void remove(Watched* stream);

 private:
  void run();

  std::chrono::milliseconds write_timeout_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;                     // guarded by mu_
  std::unordered_set<Watched*> streams_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace batchd::grpcfront

// The live one-line progress display on stderr, for a person watching a run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "tools/stress_stats.hpp"

namespace batchd::stress {

class Progress {
 public:
  // Starts redrawing about four times a second until stop().
  Progress(const LiveStats& live, std::int64_t start_ns);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Stops and erases the line, so the summary starts on a clean line. Idempotent.
  void stop();

 private:
  void loop();
  void draw(std::int64_t now_ns, std::uint64_t finished_delta, std::int64_t interval_ns) const;

  const LiveStats& live_;
  std::int64_t start_ns_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace batchd::stress

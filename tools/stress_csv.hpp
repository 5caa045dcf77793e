// --csv FILE: one row per second of the run (what was sent, answered, failed, and the latency
// quantiles of that second alone), for plotting a run over time: a load step, a node killed and
// restarted. Rows are flushed as they are written, so a file can be read while the run goes on.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/expected.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

class CsvLog {
 public:
  // Creates (truncates) the file and writes the header; a file that cannot be opened is an error.
  static Expected<std::unique_ptr<CsvLog>> open(const std::string& path, const LiveStats& live,
                                                std::int64_t start_ns);
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;

  // Writes the last, partial second's row and closes the file. Idempotent.
  void stop();

 private:
  CsvLog(std::FILE* file, const LiveStats& live, std::int64_t start_ns);
  void loop();
  void write_row(std::int64_t now_ns);

  // What the counters read at the previous row: each row is the difference.
  struct Mark {
    std::uint64_t sent = 0;
    std::uint64_t finished = 0;
    std::uint64_t errors = 0;
    std::uint64_t wrong = 0;
    LiveHistogram::Counts latency{};
  };

  std::FILE* file_;
  const LiveStats& live_;
  std::int64_t start_ns_;
  Mark last_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace batchd::stress

#include "tools/stress_csv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "tools/stress_clock.hpp"

namespace batchd::stress {

namespace {
constexpr std::chrono::seconds kRow{1};
}  // namespace

Expected<std::unique_ptr<CsvLog>> CsvLog::open(const std::string& path, const LiveStats& live,
                                               std::int64_t start_ns) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return errno_failure("--csv " + path);
  fmt::print(file, "elapsed_s,sent,ok,errors,wrong,p50_us,p99_us\n");
  std::fflush(file);
  return std::unique_ptr<CsvLog>(new CsvLog(file, live, start_ns));
}

CsvLog::CsvLog(std::FILE* file, const LiveStats& live, std::int64_t start_ns)
    : file_(file), live_(live), start_ns_(start_ns), thread_([this] { loop(); }) {}

CsvLog::~CsvLog() { stop(); }

void CsvLog::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  write_row(now_ns());
  std::fclose(file_);
}

void CsvLog::loop() {
  // Rows fall on whole seconds since the start, whatever each write costs.
  std::int64_t next_ns = start_ns_ + std::chrono::nanoseconds(kRow).count();
  std::unique_lock lock(mu_);
  for (;;) {
    const auto wait = std::chrono::nanoseconds(std::max<std::int64_t>(0, next_ns - now_ns()));
    if (wake_.wait_for(lock, wait, [this] { return stopping_; })) return;
    if (now_ns() < next_ns) continue;
    write_row(next_ns);
    next_ns += std::chrono::nanoseconds(kRow).count();
  }
}

void CsvLog::write_row(std::int64_t at_ns) {
  Mark now;
  now.sent = live_.sent.load(std::memory_order_relaxed);
  now.finished = live_.finished.load(std::memory_order_relaxed);
  now.errors = live_.errors.load(std::memory_order_relaxed);
  now.wrong = live_.wrong.load(std::memory_order_relaxed);
  now.latency = live_.latency.counts();
  LiveHistogram::Counts second{};
  for (std::size_t i = 0; i < second.size(); ++i) second[i] = now.latency[i] - last_.latency[i];
  const std::uint64_t finished = now.finished - last_.finished;
  const std::uint64_t errors = now.errors - last_.errors;
  const std::uint64_t wrong = now.wrong - last_.wrong;
  // The counters are read one by one while requests finish: never report a negative count.
  const std::uint64_t ok = finished > errors + wrong ? finished - errors - wrong : 0;
  fmt::print(file_, "{:.3f},{},{},{},{},{},{}\n", static_cast<double>(at_ns - start_ns_) / 1e9,
             now.sent - last_.sent, ok, errors, wrong, LiveHistogram::quantile_us(second, 0.5),
             LiveHistogram::quantile_us(second, 0.99));
  std::fflush(file_);
  last_ = now;
}

}  // namespace batchd::stress

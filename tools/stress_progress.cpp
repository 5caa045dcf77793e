#include "tools/stress_progress.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "tools/stress_clock.hpp"

namespace batchd::stress {

namespace {
constexpr std::chrono::milliseconds kRefresh{250};
}  // namespace

Progress::Progress(const LiveStats& live, std::int64_t start_ns)
    : live_(live), start_ns_(start_ns), thread_([this] { loop(); }) {}

Progress::~Progress() { stop(); }

void Progress::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    std::fputs("\r\x1b[K", stderr);  // erase the progress line
    std::fflush(stderr);
  }
}

void Progress::loop() {
  std::int64_t last_ns = start_ns_;
  std::uint64_t last_finished = 0;
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, kRefresh, [this] { return stopping_; })) {
    const std::int64_t now = now_ns();
    const std::uint64_t finished = live_.finished.load(std::memory_order_relaxed);
    draw(now, finished - last_finished, now - last_ns);
    last_ns = now;
    last_finished = finished;
  }
}

void Progress::draw(std::int64_t now, std::uint64_t finished_delta, std::int64_t interval_ns) const {
  const double rate = interval_ns > 0 ? static_cast<double>(finished_delta) * 1e9 /
                                            static_cast<double>(interval_ns)
                                      : 0.0;
  // \x1b[K clears what a longer previous line left behind.
  fmt::print(stderr, "\r{:7.1f}s  sent {}  {:.0f} req/s  errors {}  wrong {}  p99 ~{} us\x1b[K",
             static_cast<double>(now - start_ns_) / 1e9,
             live_.sent.load(std::memory_order_relaxed), rate,
             live_.errors.load(std::memory_order_relaxed),
             live_.wrong.load(std::memory_order_relaxed), live_.latency.quantile_us(0.99));
  std::fflush(stderr);
}

}  // namespace batchd::stress

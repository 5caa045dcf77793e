#include <poll.h>
#include <sys/prctl.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tools/stress_clock.hpp"
#include "tools/stress_loops.hpp"

namespace batchd::stress {

namespace {

// How long the harvester sleeps on the event fd at most: the client expires timeouts only
// inside poll(), so it must run every few milliseconds even when nothing arrives.
constexpr int kHarvestPollMs = 1;

class OpenLoop {
 public:
  explicit OpenLoop(RunContext& ctx);
  RunResult run();

 private:
  struct Finished {
    std::uint64_t id;
    std::int64_t latency_ns;
    Result result;
  };

  [[nodiscard]] std::int64_t intended_ns(std::uint64_t id) const noexcept;
  [[nodiscard]] bool should_send(std::uint64_t id) const noexcept;
  // Whether the request is inside the measured window (not warm-up or cool-down load).
  [[nodiscard]] bool counted(std::uint64_t id) const noexcept;
  void send_all();
  void harvest();
  void record_finished(Recorder& recorder, std::string& input);

  RunContext& ctx_;
  double period_ns_;
  std::int64_t end_ns_ = std::numeric_limits<std::int64_t>::max();      // sending stops
  std::int64_t measure_from_ns_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t measure_until_ns_ = std::numeric_limits<std::int64_t>::max();
  std::uint64_t cap_;
  Tally send_tally_, harvest_tally_;
  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<bool> sending_done_{false};
  std::vector<Finished> finished_;  // filled by callbacks inside poll(), harvester only
};

OpenLoop::OpenLoop(RunContext& ctx)
    : ctx_(ctx), period_ns_(1e9 / ctx.options.rate),
      cap_(ctx.options.requests.value_or(std::numeric_limits<std::uint64_t>::max())) {
  // poll() finishes at most one request per slot, so this never grows during the run.
  finished_.reserve(ctx.client.slot_count());
  const double expected = ctx.options.duration_s ? ctx.options.rate * *ctx.options.duration_s
                                                 : static_cast<double>(cap_);
  harvest_tally_.latencies_ns.reserve(
      static_cast<std::size_t>(std::min(expected * 1.01 + 1024.0, double{1U << 24})));
}

std::int64_t OpenLoop::intended_ns(std::uint64_t id) const noexcept {
  // From the start and the id rather than accumulated, so rounding never drifts the schedule.
  return ctx_.start_ns + std::llround(static_cast<double>(id) * period_ns_);
}

bool OpenLoop::should_send(std::uint64_t id) const noexcept {
  return id < cap_ && intended_ns(id) < end_ns_ && ctx_.client.connected() &&
         !ctx_.interrupted.load(std::memory_order_relaxed);
}

bool OpenLoop::counted(std::uint64_t id) const noexcept {
  const std::int64_t at = intended_ns(id);
  return at >= measure_from_ns_ && at < measure_until_ns_;
}

void OpenLoop::send_all() {
  // The default 50 us timer slack would make every paced send late by up to that much, and
  // that lateness would be charged to the daemon.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  Recorder recorder(send_tally_, ctx_.live, ctx_.options.cost, ctx_.options.sim_repeat);
  std::string input;
  input.reserve(ctx_.inputs.max_bytes());
  for (std::uint64_t id = 0; should_send(id); ++id) {
    ctx_.inputs.build(id, input);
    // Behind schedule we send at once and never skip: the lateness shows up in the latency.
    if (const std::int64_t due = intended_ns(id); due > now_ns()) sleep_until_ns(due);
    const bool measured = counted(id);
    if (measured) recorder.sent();
    // [this, id] fits std::function's small buffer, so the callback allocates nothing.
    auto error = ctx_.client.submit_async(input, ctx_.options.timeout, [this, id](Result&& r) {
      finished_.push_back(Finished{id, now_ns() - intended_ns(id), std::move(r)});
    });
    if (error) {
      if (measured) recorder.failed(error->code);  // refused before it was sent: no latency to speak of
    } else {
      admitted_.fetch_add(1, std::memory_order_release);
    }
  }
  sending_done_.store(true, std::memory_order_release);
}

void OpenLoop::record_finished(Recorder& recorder, std::string& input) {
  // Checked after poll() returns so the reference hashing does not delay the time stamps the
  // callbacks take.
  for (Finished& f : finished_) {
    if (!counted(f.id)) continue;
    if (f.result.ok()) {
      ctx_.inputs.build(f.id, input);  // inputs are a pure function of the id
      recorder.answered(input, f.result.output(), f.latency_ns);
    } else {
      recorder.failed(f.result.error().code);
    }
  }
}

void OpenLoop::harvest() {
  Recorder recorder(harvest_tally_, ctx_.live, ctx_.options.cost, ctx_.options.sim_repeat);
  std::string input;
  input.reserve(ctx_.inputs.max_bytes());
  pollfd event{ctx_.client.event_fd(), POLLIN, 0};
  std::uint64_t completed = 0;
  for (;;) {
    // Once sending is done the admitted count is final; before, a request may even finish
    // before the sender has counted it.
    const bool last = sending_done_.load(std::memory_order_acquire);
    if (last && completed == admitted_.load(std::memory_order_acquire)) break;
    ::poll(&event, 1, kHarvestPollMs);
    ctx_.client.poll();
    record_finished(recorder, input);
    completed += finished_.size();
    finished_.clear();
  }
}

RunResult OpenLoop::run() {
  ctx_.start_ns = now_ns();
  const auto ns = [](double s) { return static_cast<std::int64_t>(s * 1e9); };
  const bool windowed = ctx_.options.warmup_s > 0.0 || ctx_.options.cooldown_s > 0.0;
  if (ctx_.options.duration_s) {
    end_ns_ = ctx_.start_ns + ns(ctx_.options.warmup_s + *ctx_.options.duration_s + ctx_.options.cooldown_s);
  }
  if (windowed) {
    measure_from_ns_ = ctx_.start_ns + ns(ctx_.options.warmup_s);
    measure_until_ns_ = measure_from_ns_ + ns(*ctx_.options.duration_s);
  }
  {
    std::jthread harvester([this] { harvest(); });
    std::jthread sender([this] { send_all(); });
  }
  RunResult result;
  // With a window, throughput is over the window: its requests were sent at the set rate during
  // exactly that long, and the cool-down load kept the daemon as busy while they finished.
  result.wall_s = windowed ? *ctx_.options.duration_s : static_cast<double>(now_ns() - ctx_.start_ns) / 1e9;
  result.tally.merge(std::move(send_tally_));
  result.tally.merge(std::move(harvest_tally_));
  return result;
}

}  // namespace

RunResult run_open_loop(RunContext& ctx) { return OpenLoop(ctx).run(); }

}  // namespace batchd::stress

// The open loop over any transport. Each lane paces its share of the schedule (ids k, k + n,
// k + 2n, ... for lane k of n): a transport whose lanes take submits while they are pumped (the
// shared-memory client) gets a pacing thread and a pumping thread per lane, so checking answers
// never delays a send; otherwise one thread per lane sends what is due and pumps until the next
// request is due.
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shm/layout.hpp"
#include "tools/stress_clock.hpp"
#include "tools/stress_loops.hpp"

namespace batchd::stress {

namespace {

// How long a pumping thread of its own waits at most: the shared-memory client expires
// timeouts only while it is polled, so it must be polled every few milliseconds.
constexpr std::int64_t kPumpNs = 1'000'000;
// A pacing thread sends everything already due as one burst, up to this many: at high rates a
// sleep per request would cost more than the sends (a timer wake-up is tens of microseconds on
// a VM), and each request's lateness is still measured from its own intended time.
constexpr std::size_t kMaxBurst = 256;
// ... and sleeps at least this long between bursts: on a VM each timer sleep costs microseconds
// of CPU (programming the timer traps to the hypervisor), which at high rates would take the
// core the server needs. The lateness it adds (up to this) is charged to the latency.
constexpr std::int64_t kMinSleepNs = 50'000;

// When each request is meant to go, when sending stops, and which requests are counted.
class Schedule {
 public:
  Schedule(const Options& options, std::int64_t start_ns);
  [[nodiscard]] std::int64_t intended_ns(std::uint64_t id) const noexcept {
    // From the start and the id rather than accumulated, so rounding never drifts the schedule.
    return start_ns_ + shape_.offset_ns(id);
  }
  // Whether request `id` is still to be sent (the run has not reached its cap or its end).
  [[nodiscard]] bool has(std::uint64_t id) const noexcept {
    return id < cap_ && intended_ns(id) < end_ns_;
  }
  // Whether the request is inside the measured window (not warm-up or cool-down load).
  [[nodiscard]] bool counted(std::uint64_t id) const noexcept {
    const std::int64_t at = intended_ns(id);
    return at >= measure_from_ns_ && at < measure_until_ns_;
  }
  [[nodiscard]] bool windowed() const noexcept { return windowed_; }

 private:
  std::int64_t start_ns_;
  const RateShape& shape_;
  std::uint64_t cap_;
  std::int64_t end_ns_ = kNever;
  std::int64_t measure_from_ns_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t measure_until_ns_ = kNever;
  bool windowed_;
};

Schedule::Schedule(const Options& options, std::int64_t start_ns)
    : start_ns_(start_ns), shape_(options.shape),
      cap_(options.requests.value_or(std::numeric_limits<std::uint64_t>::max())),
      windowed_(options.warmup_s > 0.0 || options.cooldown_s > 0.0) {
  const auto ns = [](double s) { return static_cast<std::int64_t>(s * 1e9); };
  if (options.duration_s) {
    end_ns_ = start_ns + ns(options.warmup_s + *options.duration_s + options.cooldown_s);
  }
  if (windowed_) {
    measure_from_ns_ = start_ns + ns(options.warmup_s);
    measure_until_ns_ = measure_from_ns_ + ns(*options.duration_s);
  }
}

// One lane's share of the run: its sends, and the checks of what finished.
class LaneDriver final : public Completions {
 public:
  LaneDriver(RunContext& ctx, const Transport& transport, std::unique_ptr<OpenLane> lane,
             unsigned index, unsigned stride);
  void set_schedule(const Schedule& schedule) noexcept { schedule_ = &schedule; }
  // With a pumping thread of its own: sends every request of the share at its time.
  void pace();
  // ... and the other thread: pumps until everything sent has finished.
  void pump_until_done();
  // One thread for both.
  void pace_and_pump();
  void finished(std::uint64_t id, std::int64_t done_ns, const Outcome& outcome) override;
  // The two tallies, once the threads are done.
  void take_tallies(Tallies& into);

 private:
  [[nodiscard]] bool sending(std::uint64_t id) const noexcept;
  [[nodiscard]] Priority priority_of(std::uint64_t id) const noexcept {
    return ctx_.options.priority_mix.pick(ctx_.options.seed, id);
  }
  // Sends the requests in burst_ at once and empties it.
  void send_burst();
  void end_of_sends() noexcept;

  RunContext& ctx_;
  const Transport& transport_;
  std::unique_ptr<OpenLane> lane_;
  const Schedule* schedule_ = nullptr;
  const unsigned stride_;
  // What the pacing thread writes for every request, and (below) what the pumping thread does:
  // on cache lines of their own, so the two threads do not pass lines back and forth.
  alignas(shm::kCacheLine) std::uint64_t next_id_;
  Tallies send_tallies_;
  Recorder send_recorder_;
  std::atomic<std::uint64_t> admitted_{0};  // submits the lane took
  std::atomic<bool> sending_done_{false};
  std::vector<DueRequest> burst_;
  std::vector<std::optional<std::size_t>> refused_;
  alignas(shm::kCacheLine) std::uint64_t completed_ = 0;  // finished() calls
  Tallies done_tallies_;
  Recorder done_recorder_;
  std::string input_;
};

LaneDriver::LaneDriver(RunContext& ctx, const Transport& transport, std::unique_ptr<OpenLane> lane,
                       unsigned index, unsigned stride)
    : ctx_(ctx), transport_(transport), lane_(std::move(lane)), stride_(stride), next_id_(index),
      send_recorder_(send_tallies_, ctx.live, ctx.options.cost, ctx.options.sim_repeat, ctx.options.expected_outputs()),
      done_recorder_(done_tallies_, ctx.live, ctx.options.cost, ctx.options.sim_repeat, ctx.options.expected_outputs()) {
  static_assert(alignof(LaneDriver) == shm::kCacheLine);
  input_.reserve(ctx.inputs.max_bytes());
  burst_.reserve(kMaxBurst);
  refused_.resize(kMaxBurst);
  // Only the measured window's answers keep a sample.
  const Options& o = ctx.options;
  const double expected = o.duration_s ? o.shape.mean_rate() * *o.duration_s
                                       : static_cast<double>(o.requests.value_or(0));
  const auto samples =
      static_cast<std::size_t>(std::min(expected / stride * 1.01 + 1024.0, double{1U << 24}));
  for (const Priority p : kAllPriorities) {
    done_tallies_[p].latencies_ns.reserve(o.priority_mix.share(samples, p));
  }
}

bool LaneDriver::sending(std::uint64_t id) const noexcept {
  return schedule_->has(id) && transport_.reachable() &&
         !ctx_.interrupted.load(std::memory_order_relaxed);
}

void LaneDriver::end_of_sends() noexcept {
  lane_->end_of_sends();
  sending_done_.store(true, std::memory_order_release);
}

void LaneDriver::send_burst() {
  if (burst_.empty()) return;
  lane_->submit_burst(burst_, std::span(refused_).first(burst_.size()));
  std::uint64_t admitted = 0;
  for (std::size_t i = 0; i < burst_.size(); ++i) {
    const bool measured = schedule_->counted(burst_[i].id);
    const Priority priority = burst_[i].priority;
    if (measured) send_recorder_.sent(priority);
    if (refused_[i]) {
      // Refused before it was sent: no latency to speak of.
      if (measured) send_recorder_.failed_kind(priority, *refused_[i]);
    } else {
      ++admitted;
    }
  }
  admitted_.fetch_add(admitted, std::memory_order_release);
  burst_.clear();
}

void LaneDriver::pace() {
  while (sending(next_id_)) {
    // Behind schedule we send at once and never skip: the lateness shows up in the latency.
    const std::int64_t first_due = schedule_->intended_ns(next_id_);
    if (const std::int64_t now = now_ns(); first_due > now) sleep_until_ns(std::max(first_due, now + kMinSleepNs));
    const std::int64_t now = now_ns();
    for (; burst_.size() < kMaxBurst && sending(next_id_); next_id_ += stride_) {
      const std::int64_t due = schedule_->intended_ns(next_id_);
      if (due > now) break;
      burst_.push_back(DueRequest{next_id_, due, priority_of(next_id_), ctx_.options.model_for(next_id_)});
    }
    send_burst();
  }
  end_of_sends();
}

void LaneDriver::pump_until_done() {
  for (;;) {
    // Once sending is done the admitted count is final; before, a request may even finish
    // before the sender has counted it.
    const bool last = sending_done_.load(std::memory_order_acquire);
    if (last && completed_ == admitted_.load(std::memory_order_acquire)) return;
    lane_->pump(now_ns() + kPumpNs, *this);
  }
}

void LaneDriver::pace_and_pump() {
  bool more = true;
  for (;;) {
    const std::int64_t now = now_ns();
    for (; more && (more = sending(next_id_)); next_id_ += stride_) {
      const std::int64_t due = schedule_->intended_ns(next_id_);
      if (due > now) break;
      burst_.push_back(DueRequest{next_id_, due, priority_of(next_id_), ctx_.options.model_for(next_id_)});
      if (burst_.size() == kMaxBurst) send_burst();
    }
    send_burst();
    if (!more && !sending_done_.load(std::memory_order_relaxed)) end_of_sends();
    if (!more && completed_ == admitted_.load(std::memory_order_relaxed)) return;
    lane_->pump(more ? schedule_->intended_ns(next_id_) : kNever, *this);
  }
}

void LaneDriver::finished(std::uint64_t id, std::int64_t done_ns, const Outcome& outcome) {
  ++completed_;
  if (!schedule_->counted(id)) return;
  const Priority priority = priority_of(id);  // like the input, a pure function of the id
  if (outcome.answered) {
    ctx_.inputs.build(id, input_);
    done_recorder_.answered(priority, input_, outcome.output, done_ns - schedule_->intended_ns(id));
  } else {
    done_recorder_.failed_kind(priority, outcome.error_kind);
  }
}

void LaneDriver::take_tallies(Tallies& into) {
  into.merge(std::move(send_tallies_));
  into.merge(std::move(done_tallies_));
}

}  // namespace

RunResult run_open_loop(RunContext& ctx, Transport& transport) {
  const unsigned lanes = transport.lane_count();
  std::vector<std::unique_ptr<LaneDriver>> drivers;
  for (unsigned k = 0; k < lanes; ++k) {
    drivers.push_back(std::make_unique<LaneDriver>(ctx, transport, transport.make_lane(k), k, lanes));
  }
  ctx.start_ns = now_ns();
  const Schedule schedule(ctx.options, ctx.start_ns);
  for (auto& driver : drivers) driver->set_schedule(schedule);
  {
    std::vector<std::jthread> threads;
    for (auto& driver : drivers) {
      LaneDriver* d = driver.get();
      if (!transport.submit_while_pumping()) {
        threads.emplace_back([d] {
          // The default 50 us timer slack would make every paced send late by up to that much,
          // and that lateness would be charged to the server.
          ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
          d->pace_and_pump();
        });
        continue;
      }
      threads.emplace_back([d] { d->pump_until_done(); });
      threads.emplace_back([d] {
        ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        d->pace();
      });
    }
  }
  RunResult result;
  // With a window, throughput is over the window: its requests were sent at the set rate during
  // exactly that long, and the cool-down load kept the server as busy while they finished.
  result.wall_s = schedule.windowed() ? *ctx.options.duration_s
                                      : static_cast<double>(now_ns() - ctx.start_ns) / 1e9;
  for (auto& driver : drivers) driver->take_tallies(result.tallies);
  return result;
}

}  // namespace batchd::stress

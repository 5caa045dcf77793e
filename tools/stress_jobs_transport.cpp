#include "tools/stress_jobs_transport.hpp"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "tools/stress_clock.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_http_response.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

namespace {

// How often a pending job is polled: a job's latency is known to within this.
constexpr std::int64_t kPollEveryNs = 1'000'000;

// Submits one job on `connection`: its id, or the outcome of a refusal.
struct Submitted {
  std::string job_id;  // empty: refused, see outcome
  Outcome outcome;
};
Submitted submit_job(http::SyncConnection& connection, http::BodyDecoder& decoder, const std::string& request,
                     std::int64_t deadline_ns) {
  const http::Exchange ex = connection.exchange(request, deadline_ns);
  if (!ex.responded) return {{}, Outcome{false, {}, ex.error_kind}};
  if (ex.status != 202) return {{}, decoder.decode(ex.status, ex.body)};
  std::string id(decoder.job_id(ex.body));
  if (id.empty()) return {{}, Outcome{false, {}, error_kind(ErrorCode::kProtocolError)}};
  return {std::move(id), {}};
}

class JobsCaller final : public Caller {
 public:
  JobsCaller(const HttpTarget& target, const std::vector<int>& fds)
      : url_(target.url), encoder_(target.url, target.options.http_timeout, http::Api::kJobs),
        decoder_(http::Api::kJobs), deadline_ns_(http_client_deadline(target.options).count()) {
    for (const int fd : fds) connections_.emplace_back(target.endpoint, fd);
  }

  Outcome call(std::string_view input, const RequestOptions& options) override {
    request_.clear();
    encoder_.append(request_, input, options.priority);
    http::SyncConnection& connection = connections_[turn_++ % connections_.size()];
    const std::int64_t deadline_ns = now_ns() + deadline_ns_;
    const Submitted submitted = submit_job(connection, decoder_, request_, deadline_ns);
    if (submitted.job_id.empty()) return submitted.outcome;
    const std::string poll = http::poll_request(url_, submitted.job_id);
    for (;;) {
      const http::Exchange ex = connection.exchange(poll, deadline_ns);
      if (!ex.responded) return Outcome{false, {}, ex.error_kind};
      if (ex.status != 200 || !decoder_.job_pending(ex.body)) return decoder_.decode(ex.status, ex.body);
      if (now_ns() + kPollEveryNs > deadline_ns) return Outcome{false, {}, error_kind(ErrorCode::kTimeout)};
      std::this_thread::sleep_for(std::chrono::nanoseconds(kPollEveryNs));
    }
  }

 private:
  const http::Url& url_;
  std::deque<http::SyncConnection> connections_;  // a deque: they cannot move
  http::RequestEncoder encoder_;
  http::BodyDecoder decoder_;
  std::int64_t deadline_ns_;
  std::string request_;
  std::size_t turn_ = 0;
};

// One open-loop lane: the schedule's thread hands requests over (submit), a submitting thread
// POSTs them, a polling thread follows the accepted ones, and pump() reports what finished.
class JobsLane final : public OpenLane {
 public:
  JobsLane(const HttpTarget& target, std::vector<int> fds)
      : target_(target), deadline_ns_(http_client_deadline(target.options).count()),
        submitting_(target.endpoint, fds.empty() ? -1 : fds.front()),
        polling_(target.endpoint, fds.size() > 1 ? fds[1] : -1) {
    for (std::size_t i = 2; i < fds.size(); ++i) ::close(fds[i]);  // two are all a lane uses
    submitter_ = std::thread([this] { submit_loop(); });
    poller_ = std::thread([this] { poll_loop(); });
  }

  ~JobsLane() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    submitter_.join();
    poller_.join();
  }
  JobsLane(const JobsLane&) = delete;
  JobsLane& operator=(const JobsLane&) = delete;

  std::optional<std::size_t> submit(const DueRequest& request) override {
    {
      std::lock_guard lock(mu_);
      due_.push_back(request);
      ++in_flight_;
    }
    work_cv_.notify_all();
    return std::nullopt;  // a refusal comes back as a finished request, from pump()
  }

  void pump(std::int64_t wake_ns, Completions& done) override {
    std::deque<Finished> finished;
    {
      std::unique_lock lock(mu_);
      const auto ready = [&] { return !finished_.empty() || (in_flight_ == 0 && wake_ns == kNever); };
      while (!ready() && now_ns() < wake_ns) {
        const std::int64_t wait_ns = std::min<std::int64_t>(wake_ns - now_ns(), 10'000'000);
        done_cv_.wait_for(lock, std::chrono::nanoseconds(std::max<std::int64_t>(wait_ns, 0)));
      }
      finished.swap(finished_);
      in_flight_ -= finished.size();
    }
    for (const Finished& f : finished) {
      Outcome outcome = f.outcome;
      if (outcome.answered) outcome.output = f.output;
      done.finished(f.id, f.done_ns, outcome);
    }
  }

 private:
  struct Accepted {
    std::uint64_t id;
    std::int64_t deadline_ns;
    std::string poll;  // its GET
    std::int64_t next_poll_ns = 0;
  };
  struct Finished {
    std::uint64_t id;
    std::int64_t done_ns;
    Outcome outcome;     // its output points into `output`, set again when reported
    std::string output;
  };

  void finish(std::uint64_t id, const Outcome& outcome) {
    Finished f{id, now_ns(), outcome, outcome.answered ? std::string(outcome.output) : std::string()};
    {
      std::lock_guard lock(mu_);
      finished_.push_back(std::move(f));
    }
    done_cv_.notify_all();
  }

  void submit_loop() {
    http::RequestEncoder encoder(target_.url, target_.options.http_timeout, http::Api::kJobs);
    http::BodyDecoder decoder(http::Api::kJobs);
    std::string input, request;
    for (;;) {
      DueRequest due{};
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !due_.empty(); });
        if (stop_) return;
        due = due_.front();
        due_.pop_front();
      }
      target_.inputs.build(due.id, input);
      request.clear();
      encoder.append(request, input, due.priority);
      const std::int64_t deadline_ns = due.intended_ns + deadline_ns_;
      Submitted submitted = submit_job(submitting_, decoder, request, deadline_ns);
      if (submitted.job_id.empty()) {
        finish(due.id, submitted.outcome);
        continue;
      }
      {
        std::lock_guard lock(mu_);
        accepted_.push_back({due.id, deadline_ns, http::poll_request(target_.url, submitted.job_id)});
      }
      work_cv_.notify_all();
    }
  }

  void poll_loop() {
    http::BodyDecoder decoder(http::Api::kJobs);
    std::deque<Accepted> pending;  // this thread's
    for (;;) {
      {
        std::unique_lock lock(mu_);
        work_cv_.wait_for(lock, std::chrono::nanoseconds(kPollEveryNs),
                          [&] { return stop_ || !accepted_.empty() || !pending.empty(); });
        if (stop_) return;
        for (Accepted& a : accepted_) pending.push_back(std::move(a));
        accepted_.clear();
      }
      const std::int64_t pass_ns = now_ns();
      std::int64_t next_ns = kNever;
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->next_poll_ns > pass_ns) {
          next_ns = std::min(next_ns, it->next_poll_ns);
          ++it;
          continue;
        }
        const http::Exchange ex = polling_.exchange(it->poll, it->deadline_ns);
        if (ex.responded && ex.status == 200 && decoder.job_pending(ex.body) && now_ns() < it->deadline_ns) {
          it->next_poll_ns = now_ns() + kPollEveryNs;
          next_ns = std::min(next_ns, it->next_poll_ns);
          ++it;
          continue;
        }
        Outcome outcome = !ex.responded                      ? Outcome{false, {}, ex.error_kind}
                          : ex.status == 200 && decoder.job_pending(ex.body) ? Outcome{false, {}, error_kind(ErrorCode::kTimeout)}
                                                             : decoder.decode(ex.status, ex.body);
        finish(it->id, outcome);
        it = pending.erase(it);
      }
      if (next_ns != kNever && next_ns > now_ns()) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<std::int64_t>(next_ns - now_ns(), kPollEveryNs)));
      }
    }
  }

  const HttpTarget target_;
  const std::int64_t deadline_ns_;
  http::SyncConnection submitting_;  // the submitting thread's
  http::SyncConnection polling_;     // the polling thread's

  std::mutex mu_;
  std::condition_variable work_cv_;  // due_ or accepted_ grew, or stop_
  std::condition_variable done_cv_;  // finished_ grew
  std::deque<DueRequest> due_;       // guarded by mu_
  std::deque<Accepted> accepted_;    // guarded by mu_: submitted, for the poller to take
  std::deque<Finished> finished_;    // guarded by mu_
  std::size_t in_flight_ = 0;        // guarded by mu_: submitted, not yet reported by pump()
  bool stop_ = false;                // guarded by mu_
  std::thread submitter_;
  std::thread poller_;
};

class JobsTransport final : public Transport {
 public:
  JobsTransport(const HttpTarget& target, std::vector<int> fds) : target_(target), shares_(std::move(fds)) {}

  std::unique_ptr<Caller> make_caller(unsigned thread) override {
    return std::make_unique<JobsCaller>(target_, shares_.deal(thread, target_.options.threads));
  }
  [[nodiscard]] unsigned lane_count() const noexcept override { return target_.options.io_threads; }
  // A lane's threads take requests from a queue: the schedule may submit while another pumps.
  [[nodiscard]] bool submit_while_pumping() const noexcept override { return true; }
  std::unique_ptr<OpenLane> make_lane(unsigned lane) override {
    return std::make_unique<JobsLane>(target_, shares_.deal(lane, lane_count()));
  }

 private:
  HttpTarget target_;
  ConnectionShares shares_;
};

}  // namespace

std::unique_ptr<Transport> make_jobs_transport(const HttpTarget& target, std::vector<int> fds) {
  return std::make_unique<JobsTransport>(target, std::move(fds));
}

}  // namespace batchd::stress

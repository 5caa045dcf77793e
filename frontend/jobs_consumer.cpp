#include "frontend/jobs_consumer.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "frontend/http_api.hpp"
#include "frontend/job_verdict.hpp"
#include "frontend/jobs_api.hpp"
#include "frontend/jobs_service.hpp"
#include "shm/clock.hpp"
#include "shm/status_page.hpp"

namespace batchd::http {

namespace {

constexpr std::size_t kMaxRead = 64;                          // entries per read
constexpr std::chrono::milliseconds kIdleBlock{100};          // a read's wait while nothing is held
constexpr std::int64_t kStreamsRefreshNs = 1'000'000'000;     // the daemon's models looked at again
constexpr std::int64_t kSubmitRetryNs = 2'000'000;            // after the daemon had no room
constexpr std::uint32_t kFinishAttempts = 6;                  // answers Redis refused, then let go
constexpr std::size_t kDeadLetterFields = 64;                 // a dead letter's copy of its entry, at most
constexpr std::size_t kDeadLetterBytes = 64 << 10;
constexpr std::int64_t kNs = 1'000'000;

}  // namespace

std::string jobs_consumer_name() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return fmt::format("{}:{}:{}", host, ::getpid(), new_job_id().substr(0, 8));
}

namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool entry_says_record(const std::vector<EntryField>& fields) {
  return std::any_of(fields.begin(), fields.end(), [](const EntryField& f) { return f.first == "record" && f.second == "1"; });
}


}  // namespace

JobsConsumer::JobsConsumer(const JobsConsumerOptions& options, JobsQueue& queue, JobsCounters& counters)
    : options_(options), counters_(counters), queue_(queue) {
  thread_ = std::thread([this] { run(); });
}

JobsConsumer::~JobsConsumer() { stop(std::chrono::milliseconds(0)); }

void JobsConsumer::stop(std::chrono::milliseconds drain) {
  if (!thread_.joinable()) return;
  drain_until_ns_.store(shm::monotonic_ns() + drain.count() * kNs);
  stopping_.store(true);
  thread_.join();
}

std::vector<JobsConsumer::ModelDepth> JobsConsumer::depths() const {
  std::lock_guard lock(depths_mu_);
  return depths_;
}

std::size_t JobsConsumer::credit() const noexcept {
  std::size_t waiting_inputs = 0;
  for (const std::uint64_t serial : waiting_) waiting_inputs += held_.at(serial).job.inputs.size();
  const std::size_t used = inputs_in_flight_ + waiting_inputs;
  return used >= window_ ? 0 : window_ - used;
}

void JobsConsumer::attach() {
  Error error;
  ClientOptions client = options_.client;
  client.connect_timeout = std::chrono::milliseconds(500);
  client_ = Client::connect(client, &error);
  if (!client_) {
    // A refusal comes back at once (permission denied, too many clients): the pause keeps the
    // thread off the daemon's socket, and each distinct reason is said once.
    attach_backoff_ns_ = std::min<std::int64_t>(attach_backoff_ns_ == 0 ? 50 * kNs : 2 * attach_backoff_ns_,
                                                2'000 * kNs);
    next_attach_ns_ = shm::monotonic_ns() + attach_backoff_ns_;
    if (error.message != attach_error_) spdlog::warn("batchd-http: jobs consumer: cannot attach to the daemon: {}", error.message);
    attach_error_ = error.message;
    return;
  }
  attach_backoff_ns_ = 0;
  attach_error_.clear();
  const std::size_t half = std::max<std::size_t>(client_->slot_count() / 2, 1);
  window_ = std::min<std::size_t>(options_.max_inputs_in_flight, half);
  spdlog::info("batchd-http: jobs consumer {}: attached to the daemon; up to {} inputs in flight", queue_.consumer(),
               window_);
}

std::size_t JobsConsumer::max_window() const noexcept {
  return std::min<std::size_t>(options_.max_inputs_in_flight, std::max<std::size_t>(client_->slot_count() / 2, 1));
}

const JobsConsumer::StreamName* JobsConsumer::stream_named(const std::string& key) const {
  for (const StreamName& s : streams_) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

void JobsConsumer::refresh_streams() {
  // Only a model that runs requests now is consumed: the jobs of one loading, unloading or
  // unloaded wait in its queue until it is back (docs/JOBS.md).
  const DaemonStatus status = client_->daemon_status();
  std::vector<std::string> models;
  for (const DaemonStatus::Model& m : status.models) {
    if (!m.name.empty() && m.state == "ready") models.push_back(m.name);
  }
  if (status.models.empty()) models.emplace_back(shm::kDefaultModelName);  // a daemon before models
  std::vector<StreamName> streams;
  const auto& published = options_.results_models;
  const bool publish_all = std::find(published.begin(), published.end(), "*") != published.end();
  for (const Priority priority : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
    for (const std::string& model : models) {
      const bool publish = publish_all || std::find(published.begin(), published.end(), model) != published.end();
      StreamName name{jobs_stream_key(model, priority), model, priority,
                      publish ? std::string(redis::kJobsResultsPrefix) + model : std::string()};
      // A stream made already is kept; a new one only once its group exists (a key of another
      // type in its place costs that stream alone).
      if (stream_named(name.key) == nullptr) {
        const std::string key[] = {name.key};
        if (!queue_.ensure_streams(key)) continue;
      }
      streams.push_back(std::move(name));
    }
  }
  streams_ = std::move(streams);
  // A held entry of a model that went away has no stream now: it is given back when its turn comes.
  for (auto& [serial, held] : held_) held.stream = stream_named(held.entry.stream);
}

void JobsConsumer::finish(const StreamEntry& entry, std::string job_id, bool has_record, std::string value,
                          std::string dead_reason) {
  EntryFinish f;
  f.stream = entry.stream;
  f.entry_id = entry.id;
  f.job_id = std::move(job_id);
  f.has_record = has_record;
  f.value = std::move(value);
  f.deliveries = entry.deliveries;
  if (const StreamName* stream = stream_named(entry.stream)) f.results_stream = stream->results;
  if (!dead_reason.empty()) {
    spdlog::warn("batchd-http: jobs consumer: dead letter: entry {} of {}: {}", entry.id, entry.stream, dead_reason);
    // A copy for requeueing, bounded: a producer's entry of thousands of fields or megabytes
    // would otherwise make the dead letter itself fail.
    std::size_t bytes = 0;
    for (const EntryField& field : entry.fields) {
      bytes += field.first.size() + field.second.size();
      if (f.fields.size() == kDeadLetterFields || bytes > kDeadLetterBytes) break;
      f.fields.push_back(field);
    }
    JobsCounters::add(counters_.dead_letters);
  }
  f.dead_reason = std::move(dead_reason);
  finished_.push_back(std::move(f));
}

void JobsConsumer::take(std::vector<StreamEntry>&& entries) {
  const std::int64_t now_ms = unix_ms();
  for (StreamEntry& entry : entries) {
    JobsCounters::add(counters_.consumed);
    if (entry.deliveries > 1) JobsCounters::add(counters_.redelivered);
    if (entry.fields.empty()) {  // deleted from the stream while pending: only the acknowledgement is owed
      finish(entry, {}, false, {}, {});
      continue;
    }
    const std::string id(job_id_of(entry.fields));
    const StreamName* stream = stream_named(entry.stream);
    auto parsed = parse_job_entry(entry.fields, options_.limits);
    const JobEntry* good = std::get_if<JobEntry>(&parsed);
    if (entry.deliveries > options_.max_deliveries) {
      const std::string why = fmt::format("delivered {} times without an answer (the limit is {}): each node that "
                                          "took it died, hung, or could not run it",
                                          entry.deliveries, options_.max_deliveries);
      finish(entry, id, good != nullptr ? good->has_record : entry_says_record(entry.fields),
             id.empty() ? std::string() : failed_record(id, error_response(500, "max_deliveries", why)),
             "max_deliveries: " + why);
      continue;
    }
    if (const std::string* why = std::get_if<std::string>(&parsed)) {
      // A deleted job stays deleted: the record is written unless the entry says it had one.
      finish(entry, id, entry_says_record(entry.fields),
             id.empty() ? std::string() : failed_record(id, error_response(400, "malformed_entry", *why)),
             "malformed: " + *why);
      continue;
    }
    JobEntry& job = std::get<JobEntry>(parsed);
    if (stream == nullptr) {  // read before its model went away: another try may find it back
      continue;
    }
    if (job.deadline_ms != 0 && now_ms > job.deadline_ms) {
      expire(entry, job);
      continue;
    }
    const std::uint64_t serial = ++next_serial_;
    Held held;
    held.entry = std::move(entry);
    held.job = std::move(job);
    held.stream = stream;
    held.results.resize(held.job.inputs.size());
    held_.emplace(serial, std::move(held));
    waiting_.push_back(serial);
  }
}

void JobsConsumer::expire(const StreamEntry& entry, const JobEntry& job) {
  JobsCounters::add(counters_.deadline_expired);
  finish(entry, job.id, job.has_record,
         expired_record(job.id, fmt::format("not started by its deadline ({} ms ago)", unix_ms() - job.deadline_ms)), {});
}

void JobsConsumer::submit_waiting() {
  if (shm::monotonic_ns() < retry_submit_ns_) return;
  while (!waiting_.empty()) {
    const std::uint64_t serial = waiting_.front();
    Held& held = held_.at(serial);
    if (held.stream == nullptr) {
      waiting_.pop_front();
      JobsCounters::add(counters_.released);
      held_.erase(serial);
      continue;
    }
    const std::size_t n = held.job.inputs.size();
    if (inputs_in_flight_ > 0 && inputs_in_flight_ + n > window_) return;  // its turn comes as answers do
    if (held.job.deadline_ms != 0 && unix_ms() > held.job.deadline_ms) {  // waited here past it
      waiting_.pop_front();
      expire(held.entry, held.job);
      held_.erase(serial);
      continue;
    }
    if (n > client_->slot_count()) {  // could never be admitted whole: says so, rather than waiting forever
      waiting_.pop_front();
      const std::string why = fmt::format("a job of {} inputs is more than this node's daemon client holds ({} "
                                          "request slots): lower --jobs-max-inputs",
                                          n, client_->slot_count());
      finish(held.entry, held.job.id, held.job.has_record,
             failed_record(held.job.id, error_response(413, "too_large", why)), "input_refused: too_large: " + why);
      held_.erase(serial);
      continue;
    }
    std::vector<Client::AsyncSubmission> submissions(n);
    for (std::size_t i = 0; i < n; ++i) {
      submissions[i].input = held.job.inputs[i];
      submissions[i].priority = held.stream->priority;
      submissions[i].model = held.stream->model;
      submissions[i].done = [this, serial, i](Result&& result) { on_answer(serial, i, std::move(result)); };
    }
    const auto timeout = held.job.timeout.count() > 0 ? held.job.timeout : options_.default_timeout;
    if (!client_->submit_all_async(submissions, timeout)) {
      const Error& refusal = *submissions.front().refused;
      if (transient_failure(refusal.code)) {  // no room now: the window shrinks, and this waits its turn
        window_ = std::max<std::size_t>(window_ / 2, 1);
        retry_submit_ns_ = shm::monotonic_ns() + kSubmitRetryNs;
        return;
      }
      waiting_.pop_front();
      const std::string why = "the daemon refused it: " + refusal.message;
      finish(held.entry, held.job.id, held.job.has_record, failed_record(held.job.id, refusal),
             std::string("input_refused: ") + error_code_name(refusal.code) + ": " + refusal.message);
      held_.erase(serial);
      continue;
    }
    waiting_.pop_front();
    held.remaining = n;
    inputs_in_flight_ += n;
  }
}

void JobsConsumer::on_answer(std::uint64_t serial, std::size_t index, Result&& result) {
  const auto it = held_.find(serial);
  if (it == held_.end()) return;
  --inputs_in_flight_;
  it->second.results[index].emplace(std::move(result));
  if (--it->second.remaining == 0) conclude(serial);
}

void JobsConsumer::conclude(std::uint64_t serial) {
  Held& held = held_.at(serial);
  JobVerdict verdict = judge_job(held.job, held.results, ++held.runs);
  if (verdict.shrink_window) window_ = std::max<std::size_t>(window_ / 2, 1);
  switch (verdict.kind) {
    case JobVerdict::Kind::kRunAgain:
      for (auto& result : held.results) result.reset();
      waiting_.push_front(serial);
      retry_submit_ns_ = shm::monotonic_ns() + kSubmitRetryNs * (std::int64_t{1} << std::min<std::uint32_t>(held.runs, 8));
      return;
    case JobVerdict::Kind::kGiveBack:
      JobsCounters::add(counters_.released);
      spdlog::info("batchd-http: jobs consumer: entry {} of {} given back: {}", held.entry.id, held.entry.stream,
                   verdict.why);
      break;
    case JobVerdict::Kind::kAnswer:
      if (verdict.dead_reason.empty() && window_ < max_window()) ++window_;
      finish(held.entry, held.job.id, held.job.has_record, std::move(verdict.record), std::move(verdict.dead_reason));
      break;
  }
  held_.erase(serial);
}

void JobsConsumer::flush_finished() {
  if (finished_.empty()) return;
  std::vector<FinishOutcome> outcomes;
  if (!queue_.finish(finished_, outcomes)) return;  // kept, and tried again once Redis answers
  std::vector<EntryFinish> again;  // refused by Redis (full, say): tried again next time
  for (std::size_t i = 0; i < finished_.size(); ++i) {
    EntryFinish& f = finished_[i];
    if (outcomes[i] == FinishOutcome::kFailed) {
      // Refused again and again: first without the extras (the dead letter's copy, the results
      // stream), then let go, so the entry is no longer refreshed and is claimed anew.
      if (++f.attempts == kFinishAttempts / 2) {
        f.fields.clear();
        f.results_stream.clear();
      }
      if (f.attempts < kFinishAttempts) {
        again.push_back(std::move(f));
      } else {
        spdlog::error("batchd-http: jobs consumer: entry {} of {}: its answer could not be stored; left for "
                      "another delivery", f.entry_id, f.stream);
      }
      continue;
    }
    if (outcomes[i] == FinishOutcome::kDuplicate) JobsCounters::add(counters_.duplicates);
    if (outcomes[i] != FinishOutcome::kStored) continue;
    const char state = f.value.empty() ? '\0' : f.value.front();
    if (state == static_cast<char>(JobState::kDone)) JobsCounters::add(counters_.done);
    if (state == static_cast<char>(JobState::kFailed)) JobsCounters::add(counters_.failed);
  }
  finished_ = std::move(again);
}

void JobsConsumer::touch_held() {
  for (const StreamName& s : streams_) {
    std::vector<std::string> ids;
    for (const auto& [serial, held] : held_) {
      if (held.entry.stream == s.key) ids.push_back(held.entry.id);
    }
    for (const EntryFinish& f : finished_) {
      if (f.stream == s.key) ids.push_back(f.entry_id);
    }
    std::vector<std::string> lost;
    if (!queue_.touch(s.key, ids, lost)) return;
    // Claimed by another node while this one stalled: what has not started here is left to it
    // (what runs finishes, and its answer counts as a duplicate if the other's came first).
    for (const std::string& id : lost) {
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
        const Held& held = held_.at(*it);
        if (held.entry.stream != s.key || held.entry.id != id) continue;
        held_.erase(*it);
        waiting_.erase(it);
        break;
      }
    }
  }
}

void JobsConsumer::claim_idle() {
  for (const StreamName& s : streams_) {
    const std::size_t room = credit();
    if (room == 0) return;
    std::vector<StreamEntry> entries;
    if (!queue_.claim_idle(s.key, options_.claim_idle, std::min(room, kMaxRead), entries)) return;
    take(std::move(entries));
  }
}

void JobsConsumer::read_new(bool idle) {
  // COUNT applies to each stream of a read: the room is shared among them, at least one each.
  const auto per_stream = [](std::size_t room, std::size_t streams) {
    return std::max<std::size_t>(1, std::min(room, kMaxRead) / std::max<std::size_t>(streams, 1));
  };
  std::vector<StreamEntry> entries;
  if (idle) {  // all streams in one blocking read: whichever has an entry first
    std::vector<std::string> keys;
    for (const StreamName& s : streams_) keys.push_back(s.key);
    if (queue_.read(keys, per_stream(credit(), keys.size()), kIdleBlock, entries)) take(std::move(entries));
    return;
  }
  // Higher classes first: a class is read only with the room the classes above it left.
  for (const Priority priority : {Priority::kHigh, Priority::kNormal, Priority::kLow}) {
    const std::size_t room = credit();
    if (room == 0) return;
    std::vector<std::string> keys;
    for (const StreamName& s : streams_) {
      if (s.priority == priority) keys.push_back(s.key);
    }
    entries.clear();
    if (!queue_.read(keys, per_stream(room, keys.size()), std::chrono::milliseconds(0), entries)) return;
    take(std::move(entries));
  }
}

void JobsConsumer::sample_depths() {
  std::vector<ModelDepth> depths;
  for (const StreamName& s : streams_) {
    ModelDepth d{s.model, std::string(priority_name(s.priority)), {}};
    if (!queue_.depth(s.key, d.depth)) return;
    depths.push_back(std::move(d));
  }
  std::lock_guard lock(depths_mu_);
  depths_ = std::move(depths);
}

void JobsConsumer::run() {
  std::int64_t next_streams_ns = 0, next_touch_ns = 0, next_claim_ns = 0, next_depth_ns = 0;
  const std::int64_t claim_idle_ns = options_.claim_idle.count() * kNs;
  for (;;) {
    const bool stopping = stopping_.load();
    if (stopping) {
      // What has not started is left pending, for another node to claim; what runs may finish.
      for (const std::uint64_t serial : waiting_) held_.erase(serial);
      waiting_.clear();
      if (held_.empty() || shm::monotonic_ns() >= drain_until_ns_.load()) break;
    }
    if (!client_) {
      if (stopping) break;
      if (shm::monotonic_ns() < next_attach_ns_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      attach();
      if (!client_) continue;
    }
    client_->poll();
    submit_waiting();  // what is held runs even while the queue cannot be reached
    if (!queue_.ready()) {
      if (held_.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } else {
        client_->poll_wait(std::chrono::milliseconds(20));
      }
      continue;
    }
    const std::int64_t now = shm::monotonic_ns();
    if (now >= next_streams_ns) {
      refresh_streams();
      next_streams_ns = now + kStreamsRefreshNs;
    }
    flush_finished();
    if (now >= next_touch_ns) {
      touch_held();
      next_touch_ns = now + claim_idle_ns / 3;
    }
    // Nothing is taken while the daemon is away: its jobs would only wait here, and cost their
    // deliveries, while an attached node could run them.
    const bool taking = !stopping && client_->connected() && !streams_.empty();
    if (taking && now >= next_claim_ns) {
      claim_idle();
      next_claim_ns = now + std::max<std::int64_t>(claim_idle_ns / 4, 50 * kNs);
    }
    if (now >= next_depth_ns) {
      sample_depths();
      next_depth_ns = now + kStreamsRefreshNs;
    }
    const bool idle = held_.empty() && finished_.empty();
    if (taking) read_new(idle);
    submit_waiting();
    if (!finished_.empty() || (idle && !taking)) {
      // Redis refused some answers, or there is nothing to read: no spinning either way.
      client_->poll_wait(std::chrono::milliseconds(20));
    } else if (!held_.empty()) {
      client_->poll_wait(std::chrono::milliseconds(2));
    }
  }
  client_.reset();
  if (queue_.ready()) flush_finished();
}

}  // namespace batchd::http

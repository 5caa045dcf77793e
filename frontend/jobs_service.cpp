#include "frontend/jobs_service.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <iterator>
#include <stdexcept>

#include "frontend/jobs_consumer.hpp"
#include "frontend/jobs_streams_redis.hpp"
#include "frontend/metrics.hpp"

namespace batchd::http {

namespace {

constexpr std::uint64_t kDeadLettersKept = 100000;  // in Redis's dead-letter stream (MAXLEN ~)

}  // namespace

JobsInboxes::JobsInboxes(std::span<const int> wake_fds)
    : wake_fds_(wake_fds.begin(), wake_fds.end()), boxes_(std::make_unique<Box[]>(wake_fds.size())) {}

void JobsInboxes::post(unsigned worker, std::function<void()> task) {
  Box& box = boxes_[worker];
  bool was_empty = false;
  {
    std::lock_guard lock(box.mu);
    was_empty = box.mail.empty();
    box.mail.push_back(std::move(task));
  }
  // A box that held mail already has a wake-up on its way: the loop takes everything at once.
  if (!was_empty) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fds_[worker], &one, sizeof(one));
}

JobsInboxes::Mail JobsInboxes::take(unsigned worker) {
  Box& box = boxes_[worker];
  Mail mail;
  std::lock_guard lock(box.mu);
  std::swap(mail, box.mail);
  return mail;
}

JobsService::JobsService(const JobsOptions& options, std::span<const int> wake_fds)
    : options_(options), inboxes_(wake_fds) {
  JobsConsumerOptions consumer;
  consumer.client.socket_path = options_.socket_path;
  consumer.limits.max_inputs = options_.max_inputs;
  consumer.limits.max_timeout = options_.max_timeout;
  consumer.default_timeout = options_.default_timeout;
  consumer.claim_idle = options_.claim_idle;
  consumer.max_deliveries = options_.max_deliveries;
  consumer.max_inputs_in_flight = options_.inputs_in_flight;
  consumer.results_models = options_.results_models;
  if (!uses_redis() && !options_.results_models.empty()) {
    throw std::invalid_argument("--jobs-results-stream needs --jobs-redis: results streams live in Redis");
  }
  if (uses_redis()) {
    const redis::RedisAddress address = redis::parse_redis_url(options_.redis_url);
    store_ = make_redis_jobs_store(address, inboxes_, counters_);
    redis_queue_ = std::make_unique<RedisJobsStreams>(address, jobs_consumer_name(), options_.ttl, kDeadLettersKept,
                                                      options_.results_kept);
    queue_ = redis_queue_.get();
  } else {
    EmbeddedJobs embedded = make_memory_jobs_store(options_.limits, options_.ttl, counters_);
    store_ = std::move(embedded.store);
    queue_ = embedded.queue;
  }
  consumer_ = std::make_unique<JobsConsumer>(consumer, *queue_, counters_);
}

JobsService::~JobsService() = default;

void JobsService::stop_consumer(std::chrono::milliseconds drain) { consumer_->stop(drain); }

void JobsService::render_metrics(std::string& out) const {
  const auto counter = [&](std::string_view name, std::string_view help, const std::atomic<std::uint64_t>& value) {
    metric_family(out, name, "counter", help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value.load(std::memory_order_relaxed));
  };
  counter("batchd_http_jobs_submitted_total", "Jobs accepted (202).", counters_.submitted);
  counter("batchd_http_jobs_done_total", "Jobs whose every input was answered, result stored.", counters_.done);
  counter("batchd_http_jobs_failed_total", "Jobs that failed (an input's error stored).", counters_.failed);
  counter("batchd_http_jobs_cancelled_total", "Jobs deleted while pending.", counters_.cancelled);
  counter("batchd_http_jobs_expired_total", "Jobs the embedded store dropped at their TTL.", counters_.expired);
  counter("batchd_http_jobs_store_full_total", "Job submissions refused because the store was full.",
          counters_.store_full);
  counter("batchd_http_jobs_store_errors_total", "Jobs store calls that failed (store unreachable).",
          counters_.store_errors);
  {
    counter("batchd_http_jobs_consumed_total", "Queue entries this node's consumer took.", counters_.consumed);
    counter("batchd_http_jobs_redelivered_total", "Entries taken again after another delivery left them.",
            counters_.redelivered);
    counter("batchd_http_jobs_released_total", "Entries given back for another delivery after a transient failure.",
            counters_.released);
    counter("batchd_http_jobs_dead_letters_total", "Entries moved to the dead-letter stream.", counters_.dead_letters);
    counter("batchd_http_jobs_deadline_expired_total", "Jobs that ended expired, not started by their deadline.",
            counters_.deadline_expired);
    counter("batchd_http_jobs_duplicates_total", "Answers found already stored by another delivery.",
            counters_.duplicates);
    const auto depths = consumer_->depths();
    const auto gauge = [&](std::string_view name, std::string_view help, auto value_of) {
      metric_family(out, name, "gauge", help);
      for (const JobsConsumer::ModelDepth& d : depths) {
        fmt::format_to(std::back_inserter(out), "{}{{model=\"{}\",priority=\"{}\"}} {}\n", name, d.model, d.priority,
                       value_of(d.depth));
      }
    };
    gauge("batchd_http_jobs_queue_entries", "Unanswered entries in the queue (waiting or pending on a node).",
          [](const StreamDepth& d) { return d.entries; });
    gauge("batchd_http_jobs_queue_pending", "Entries delivered to a node and not yet answered.",
          [](const StreamDepth& d) { return d.pending; });
    gauge("batchd_http_jobs_queue_oldest_seconds", "Age of the oldest unanswered entry.",
          [](const StreamDepth& d) { return static_cast<double>(d.oldest_age_ms) / 1000.0; });
  }
  const std::int64_t stored = store_->size();
  if (stored >= 0) {
    metric_family(out, "batchd_http_jobs_stored", "gauge", "Jobs the embedded store holds (pending and finished).");
    fmt::format_to(std::back_inserter(out), "batchd_http_jobs_stored {}\n", stored);
  }
}

}  // namespace batchd::http

// The event loop's side of asynchronous jobs. With Redis, a submission's pending record and its
// queue entry are written together and the job is answered 202 once Redis has both; any node's
// consumer (jobs_consumer.cpp) runs it. With the embedded store, the record is stored first and
// the job then handed to this loop's daemon at once: its answers gather here, and the last one
// writes the result. Every store call is asynchronous: nothing here waits on the store.
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "frontend/jobs_entry.hpp"
#include "frontend/loop_internal.hpp"
#include "shm/status_page.hpp"

namespace batchd::http {

namespace {

// A pending record outlives its job's deadline by the result's TTL, so the record of a job whose
// node died mid-way still disappears by itself.
std::chrono::seconds pending_ttl(const JobsOptions& options, std::chrono::milliseconds timeout) {
  return options.ttl + std::chrono::ceil<std::chrono::seconds>(timeout);
}

Response json_response(unsigned status, std::string body) {
  Response response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace

void EventLoop::on_jobs_request(Conn& conn, std::uint64_t seq, Request&& request, Priority granted) {
  JobsAction action = jobs_api_->route(request);
  const Caller caller{conn.index, conn.generation, seq, now_ns_};
  if (const Response* response = std::get_if<Response>(&action)) {
    answer(conn, seq, *response, now_ns_);
  } else if (JobSubmit* job = std::get_if<JobSubmit>(&action)) {
    job->priority = admit(job->priority, granted);  // now: the job runs later, on this grant
    submit_job(caller, std::move(*job));
  } else if (const JobPoll* poll = std::get_if<JobPoll>(&action)) {
    poll_job(caller, poll->id);
  } else {
    delete_job(caller, std::get<JobDelete>(action).id);
  }
}

void EventLoop::enqueue_job(const Caller& caller, JobSubmit&& job) {
  const JobsOptions& options = jobs_.options();
  const std::string model = job.model.empty() ? std::string(shm::kDefaultModelName) : job.model;
  // A stream per model name: only the names the daemon serves make one.
  if (const oip::ModelCatalog::Lookup lookup = models().find(model, ""); !lookup.model) {
    answer_caller(caller, error_response(404, "unknown_model", lookup.error));
    return;
  }
  JobEntry entry;
  entry.id = new_job_id();
  entry.inputs = std::move(job.inputs);
  entry.many = job.many;
  entry.timeout = job.timeout;
  const std::chrono::seconds deadline = job.deadline.count() > 0 ? job.deadline : options.default_deadline;
  entry.deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          (std::chrono::system_clock::now() + deadline).time_since_epoch()).count();
  entry.has_record = true;
  // The pending record outlives the wait and the run, then the result's TTL, so a job whose
  // every node died still disappears by itself.
  const std::chrono::seconds ttl = options.ttl + deadline + std::chrono::ceil<std::chrono::seconds>(job.timeout);
  std::string id = entry.id;
  jobs_.store().enqueue(context_.index, id, encode_job(JobState::kPending, job_pending_body(id)), ttl,
                        jobs_stream_key(model, job.priority), job_entry_fields(entry), options.queue_max,
                        [this, caller, id](StoreReply&& reply) {
                          if (reply.status == StoreStatus::kFull) {
                            JobsCounters::add(jobs_.counters().store_full);
                            answer_caller(caller, error_response(503, "jobs_queue_full", reply.message, 1));
                            return;
                          }
                          if (reply.status != StoreStatus::kOk) {
                            answer_caller(caller, store_failure(reply, id));
                            return;
                          }
                          JobsCounters::add(jobs_.counters().submitted);
                          Response accepted = json_response(202, job_pending_body(id));
                          accepted.location = std::string(kJobsPath) + "/" + id;
                          answer_caller(caller, accepted);
                        });
}

void EventLoop::submit_job(const Caller& caller, JobSubmit&& job) {
  if (jobs_.store().queues()) {
    enqueue_job(caller, std::move(job));
    return;
  }
  if (link_.client() == nullptr) {
    answer_caller(caller, error_response(503, "daemon_unavailable",
                                         "not attached to the batchd daemon: " + link_.last_error(), 1));
    return;
  }
  if (!jobs_.try_start_running()) {
    JobsCounters::add(jobs_.counters().store_full);
    answer_caller(caller, error_response(503, "jobs_store_full",
                                         "this node runs its maximum of " +
                                             std::to_string(jobs_.options().limits.max_jobs) + " jobs",
                                         1));
    return;
  }
  std::string id = new_job_id();
  const std::chrono::seconds ttl = pending_ttl(jobs_.options(), job.timeout);
  std::string value = encode_job(JobState::kPending, job_pending_body(id));
  jobs_.store().create(context_.index, id, std::move(value), ttl,
                       [this, caller, id, job = std::move(job)](StoreReply&& reply) {
                         on_job_stored(caller, id, job, std::move(reply));
                       });
}

void EventLoop::on_job_stored(const Caller& caller, const std::string& id, const JobSubmit& job,
                              StoreReply&& reply) {
  if (reply.status != StoreStatus::kOk) {
    jobs_.release_running();
    answer_caller(caller, store_failure(reply, id));
    return;
  }
  Conn* conn = lookup(caller.index, caller.generation);
  Client* client = link_.client();
  if (conn == nullptr || conn->state == Conn::State::kClosing || client == nullptr) {
    // The caller left before learning the id, so no one could ever poll the job: drop it.
    jobs_.release_running();
    jobs_.store().remove(context_.index, id, [](StoreReply&&) {});
    return;
  }
  const std::uint64_t serial = ++next_job_serial_;
  std::vector<Client::AsyncSubmission> submissions(job.inputs.size());
  for (std::size_t i = 0; i < job.inputs.size(); ++i) {
    submissions[i].input = job.inputs[i];
    submissions[i].priority = job.priority;
    submissions[i].model = job.model;
    submissions[i].done = [this, serial, i](Result&& result) { on_job_answer(serial, i, std::move(result)); };
  }
  const std::size_t admitted = client->submit_many_async(submissions, job.timeout);
  answers_owed_ += static_cast<std::int64_t>(admitted);
  metrics_.add_in_flight(static_cast<std::int64_t>(admitted));
  if (admitted < submissions.size()) {
    // All or nothing: a job the daemon cannot take whole is refused the way a synchronous
    // request is (503 overloaded, 413 too_large, ...), rather than half run.
    const Error* refusal = nullptr;
    for (const Client::AsyncSubmission& s : submissions) {
      if (!s.refused) {
        client->cancel(s.id);
      } else if (refusal == nullptr) {
        refusal = &*s.refused;
      }
    }
    jobs_.release_running();
    jobs_.store().remove(context_.index, id, [](StoreReply&&) {});
    answer_caller(caller, response_for_error(*refusal));
    return;
  }
  auto running = std::make_unique<RunningJob>();
  running->id = id;
  running->many = job.many;
  running->results.resize(submissions.size());
  running->remaining = submissions.size();
  for (const Client::AsyncSubmission& s : submissions) running->request_ids.push_back(s.id);
  running_jobs_.emplace(serial, std::move(running));
  running_job_serials_.emplace(id, serial);
  jobs_.register_running(id, context_.index);
  JobsCounters::add(jobs_.counters().submitted);
  Response accepted = json_response(202, job_pending_body(id));
  accepted.location = std::string(kJobsPath) + "/" + id;
  answer_caller(caller, accepted);
}

void EventLoop::on_job_answer(std::uint64_t serial, std::size_t index, Result&& result) {
  --answers_owed_;
  metrics_.add_in_flight(-1);
  const auto it = running_jobs_.find(serial);
  if (it == running_jobs_.end()) return;  // a job refused whole: its admitted inputs were withdrawn
  RunningJob& job = *it->second;
  job.results[index].emplace(std::move(result));
  if (--job.remaining > 0) return;
  finish_job(job);
  running_jobs_.erase(it);
}

void EventLoop::finish_job(RunningJob& job) {
  // The job fails with its first failed input's error, as the synchronous API would have answered
  // that input; otherwise it is done with every output.
  std::optional<Response> error;
  std::vector<std::string> outputs;
  outputs.reserve(job.results.size());
  for (std::size_t i = 0; i < job.results.size() && !error; ++i) {
    Result& result = *job.results[i];
    const std::string where = job.many ? "input " + std::to_string(i) + ": " : std::string();
    if (!result.ok()) {
      error = response_for_error(Error{result.error().code, where + result.error().message});
    } else if (!simdjson::validate_utf8(result.output().data(), result.output().size())) {
      error = error_response(500, "invalid_output", where + "the backend's output is not valid UTF-8");
    } else {
      outputs.push_back(std::move(result.output()));
    }
  }
  std::string value = error ? encode_job(JobState::kFailed, job_failed_body(job.id, *error))
                            : encode_job(JobState::kDone, job_done_body(job.id, outputs, job.many));
  running_job_serials_.erase(job.id);
  jobs_.unregister_running(job.id);
  jobs_.release_running();
  JobsCounters& counters = jobs_.counters();
  const bool failed = error.has_value();
  jobs_.store().complete(context_.index, job.id, std::move(value), jobs_.options().ttl,
                         [&counters, failed, id = job.id](StoreReply&& reply) {
                           if (reply.status == StoreStatus::kOk) {
                             JobsCounters::add(failed ? counters.failed : counters.done);
                           } else if (reply.status != StoreStatus::kNotFound) {  // not found: deleted meanwhile
                             JobsCounters::add(counters.store_errors);
                             spdlog::warn("batchd-http: job {}: its result is lost: {}", id, reply.message);
                           }
                         });
}

void EventLoop::poll_job(const Caller& caller, const std::string& id) {
  jobs_.store().get(context_.index, id, [this, caller, id](StoreReply&& reply) {
    if (reply.status != StoreStatus::kOk || reply.value.empty()) {
      answer_caller(caller, store_failure(reply, id));
      return;
    }
    answer_caller(caller, json_response(200, reply.value.substr(1)));
  });
}

void EventLoop::delete_job(const Caller& caller, const std::string& id) {
  jobs_.store().remove(context_.index, id, [this, caller, id](StoreReply&& reply) {
    if (reply.status != StoreStatus::kOk) {
      answer_caller(caller, store_failure(reply, id));
      return;
    }
    const bool pending = !reply.value.empty() && reply.value.front() == static_cast<char>(JobState::kPending);
    if (pending) {
      JobsCounters::add(jobs_.counters().cancelled);
      withdraw_job(id);
    }
    answer_caller(caller, json_response(200, job_deleted_body(id, pending ? "cancelled" : "deleted")));
  });
}

void EventLoop::withdraw_job(const std::string& id) {
  // Only this process knows where its jobs run; a job another node runs keeps running there and
  // its result is discarded (the store keeps no deleted record).
  const std::optional<unsigned> runner = jobs_.runner_of(id);
  if (!runner) return;
  if (*runner == context_.index) {
    cancel_job(id);
  } else {
    jobs_.inboxes().post_cancel(*runner, id);
  }
}

void EventLoop::cancel_job(const std::string& id) {
  const auto serial = running_job_serials_.find(id);
  Client* client = link_.client();
  if (serial == running_job_serials_.end() || client == nullptr) return;
  const auto job = running_jobs_.find(serial->second);
  if (job == running_jobs_.end()) return;
  // Each withdrawn request still calls back (cancelled), which finishes the job as usual; its
  // result then finds no record to replace.
  for (const std::uint64_t request : job->second->request_ids) client->cancel(request);
}

void EventLoop::take_jobs_mail() {
  JobsInboxes::Mail mail = jobs_.inboxes().take(context_.index);
  for (auto& task : mail.tasks) task();
  for (const std::string& id : mail.cancels) cancel_job(id);
}

void EventLoop::answer_caller(const Caller& caller, const Response& response) {
  Conn* conn = lookup(caller.index, caller.generation);
  if (conn == nullptr || conn->state == Conn::State::kClosing) return;  // the caller left
  answer(*conn, caller.seq, response, caller.started_ns);
}

Response EventLoop::store_failure(const StoreReply& reply, const std::string& id) {
  switch (reply.status) {
    case StoreStatus::kNotFound: return job_not_found(id);
    case StoreStatus::kFull:
      JobsCounters::add(jobs_.counters().store_full);
      return error_response(503, "jobs_store_full", reply.message, 1);
    case StoreStatus::kExists:  // two ids alike out of 2^128: retrying is the cure
      return error_response(503, "jobs_store_unavailable", "job id collision; retry", 1);
    case StoreStatus::kOk:  // an empty value: no job record looks like that
    case StoreStatus::kUnavailable: break;
  }
  JobsCounters::add(jobs_.counters().store_errors);
  return error_response(503, "jobs_store_unavailable",
                        reply.message.empty() ? "the jobs store failed" : reply.message, 1);
}

}  // namespace batchd::http

// The event loop's side of asynchronous jobs. A submission's pending record and its queue entry
// are stored together (one Lua script in Redis, one lock in the embedded store), and the job is
// answered 202 once the store holds both; the jobs consumer (jobs_consumer.cpp) of this node or,
// with Redis, of any node runs it and stores its answer. Every store call is asynchronous: with
// Redis its reply comes later, through the loop's inbox; nothing here waits on the store.
#include <chrono>

#include "frontend/jobs_entry.hpp"
#include "frontend/loop_internal.hpp"
#include "shm/status_page.hpp"

namespace batchd::http {

namespace {

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

void EventLoop::submit_job(const Caller& caller, JobSubmit&& job) {
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

void EventLoop::poll_job(const Caller& caller, const std::string& id) {
  jobs_.store().get(context_.index, id, [this, caller, id](StoreReply&& reply) {
    if (reply.status != StoreStatus::kOk || reply.value.empty()) {
      answer_caller(caller, store_failure(reply, id));
      return;
    }
    answer_caller(caller, json_response(200, reply.value.substr(1)));
  });
}

// A pending job's record goes; a consumer that already holds the job runs it and drops its answer
// (a deleted job never comes back), and one still waiting in the embedded queue never runs.
void EventLoop::delete_job(const Caller& caller, const std::string& id) {
  jobs_.store().remove(context_.index, id, [this, caller, id](StoreReply&& reply) {
    if (reply.status != StoreStatus::kOk) {
      answer_caller(caller, store_failure(reply, id));
      return;
    }
    const bool pending = !reply.value.empty() && reply.value.front() == static_cast<char>(JobState::kPending);
    if (pending) JobsCounters::add(jobs_.counters().cancelled);
    answer_caller(caller, json_response(200, job_deleted_body(id, pending ? "cancelled" : "deleted")));
  });
}

void EventLoop::take_jobs_mail() {
  for (auto& task : jobs_.inboxes().take(context_.index)) task();
}

void EventLoop::answer_caller(const Caller& caller, const Response& response) {
  Conn* conn = lookup(caller.index, caller.generation);
  if (conn == nullptr || conn->state == Conn::State::kClosing) return;  // the caller left
  answer(*conn, caller.seq, response, caller.started_ns);
}

Response EventLoop::store_failure(const StoreReply& reply, const std::string& id) {
  const unsigned shed = oip::overload_http_status(options_.overload_status);
  switch (reply.status) {
    case StoreStatus::kNotFound: return job_not_found(id);
    case StoreStatus::kFull:
      JobsCounters::add(jobs_.counters().store_full);
      return error_response(shed, "jobs_store_full", reply.message, 1);
    case StoreStatus::kQueueFull:
      JobsCounters::add(jobs_.counters().store_full);
      return error_response(shed, "jobs_queue_full", reply.message, 1);
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

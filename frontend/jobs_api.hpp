// The jobs endpoints' protocol side, free of I/O like http_api: which /v1/jobs request is which,
// what a submission must look like, and the JSON bodies a job's poll answers with.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "frontend/http_api.hpp"

namespace batchd::http {

inline constexpr std::string_view kJobsPath = "/v1/jobs";

// POST /v1/jobs that passed every check: its inputs go to the daemon.
struct JobSubmit {
  std::vector<std::string> inputs;
  bool many = false;  // sent as "inputs" (answered with "outputs"), not "input"
  std::chrono::milliseconds timeout{};
  Priority priority = Priority::kNormal;
  std::string model;  // by name ("model" in the body); empty: the default model
  // By when it must start ("deadline_s" in the body, or X-Job-Deadline-S), from now; 0: the
  // node's default. Only a queued job (Redis) waits: the embedded store runs it at once.
  std::chrono::seconds deadline{0};
};
struct JobPoll {  // GET or HEAD /v1/jobs/{id}
  std::string id;
};
struct JobDelete {  // DELETE /v1/jobs/{id}
  std::string id;
};
using JobsAction = std::variant<Response, JobSubmit, JobPoll, JobDelete>;

// Whether the request's path is /v1/jobs or below it (the jobs router answers all of those).
bool is_jobs_target(std::string_view target) noexcept;

// One per event loop, like Api.
class JobsApi {
 public:
  JobsApi(const ApiLimits& limits, std::uint32_t max_inputs, std::chrono::seconds max_deadline, ApiContext& context);

  // Precondition: is_jobs_target(request.target()).
  JobsAction route(const Request& request);

 private:
  JobsAction submit(const Request& request);
  // Reads "input" or "inputs" from the body into `job`.
  std::optional<Response> read_inputs(simdjson::dom::object root, JobSubmit& job);
  std::optional<Response> read_deadline(const Request& request, simdjson::dom::object root, JobSubmit& job) const;

  ApiLimits limits_;
  std::uint32_t max_inputs_;
  std::chrono::seconds max_deadline_;
  ApiContext& context_;  // borrowed; outlives the JobsApi
  simdjson::dom::parser json_;
};

// A fresh job id: 128 bits from the kernel's random source, as 32 lower-case hex digits, so ids
// are unguessable and two nodes never pick the same one.
std::string new_job_id();
// Whether `id` has the form new_job_id gives (so nothing else reaches the store).
bool valid_job_id(std::string_view id) noexcept;

// 404 job_not_found for `id`.
Response job_not_found(std::string_view id);

// The bodies stored for a job (and answered by its polls).
std::string job_pending_body(std::string_view id);
// outputs[i] answers the job's input i; `many` says whether to write "outputs" or "output".
std::string job_done_body(std::string_view id, std::span<const std::string> outputs, bool many);
// `error` is an error response (its body {"error":{...}}, as the synchronous API answers).
std::string job_failed_body(std::string_view id, const Response& error);
// A job that ended without an answer in `status` ("expired"), with `error`'s members.
std::string job_error_body(std::string_view id, std::string_view status, const Response& error);
// A DELETE's answer: the job's state was "cancelled" (it was pending) or "deleted".
std::string job_deleted_body(std::string_view id, std::string_view status);

}  // namespace batchd::http

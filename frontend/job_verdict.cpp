#include "frontend/job_verdict.hpp"

#include <simdjson.h>

#include <vector>

#include "frontend/http_api.hpp"
#include "frontend/jobs_api.hpp"
#include "frontend/jobs_store.hpp"

namespace batchd::http {

namespace {

constexpr std::uint32_t kMaxRuns = 8;          // transient failures run again, then given back
constexpr std::uint32_t kMaxTimedOutRuns = 2;

}  // namespace

bool transient_failure(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kTimeout:
    case ErrorCode::kOverloaded:
    case ErrorCode::kDaemonUnavailable:
    case ErrorCode::kBackendUnavailable:
    case ErrorCode::kCancelled:
    case ErrorCode::kProtocolError:
    case ErrorCode::kTooManyClients: return true;
    case ErrorCode::kTooLarge:
    case ErrorCode::kInvalidUtf8:
    case ErrorCode::kBackendError:
    case ErrorCode::kPermissionDenied:
    case ErrorCode::kUnknownModel: return false;
  }
  return true;
}

std::string failed_record(std::string_view id, const Response& error) {
  return encode_job(JobState::kFailed, job_failed_body(id, error));
}

// Shedding is transient (run again or given back), never a job's end, so --overload-status has
// no say in a record.
std::string failed_record(std::string_view id, const Error& error) {
  return failed_record(id, response_for_error(error, oip::OverloadStatus::k503));
}

std::string expired_record(std::string_view id, const std::string& why) {
  return encode_job(JobState::kExpired, job_error_body(id, "expired", error_response(504, "expired", why)));
}

JobVerdict judge_job(const JobEntry& job, std::span<std::optional<Result>> results, std::uint32_t runs) {
  JobVerdict verdict;
  for (const std::optional<Result>& r : results) {
    if (r->ok() || !transient_failure(r->error().code)) continue;
    const ErrorCode code = r->error().code;
    verdict.shrink_window = code == ErrorCode::kOverloaded || code == ErrorCode::kTimeout;
    if (runs < (code == ErrorCode::kTimeout ? kMaxTimedOutRuns : kMaxRuns)) {
      verdict.kind = JobVerdict::Kind::kRunAgain;
    } else {
      verdict.kind = JobVerdict::Kind::kGiveBack;
      verdict.why = r->error().message;
    }
    return verdict;
  }
  std::vector<std::string> outputs;
  for (std::size_t i = 0; i < results.size(); ++i) {
    Result& r = *results[i];
    const std::string where = job.many ? "input " + std::to_string(i) + ": " : std::string();
    if (!r.ok()) {
      verdict.record = failed_record(job.id, Error{r.error().code, where + r.error().message});
      verdict.dead_reason = std::string("input_failed: ") + where + error_code_name(r.error().code) + ": " +
                            r.error().message;
      return verdict;
    }
    if (!simdjson::validate_utf8(r.output().data(), r.output().size())) {
      const std::string why = where + "the backend's output is not valid UTF-8";
      verdict.record = failed_record(job.id, error_response(500, "invalid_output", why));
      verdict.dead_reason = "invalid_output: " + why;
      return verdict;
    }
    outputs.push_back(std::move(r.output()));
  }
  verdict.record = encode_job(JobState::kDone, job_done_body(job.id, outputs, job.many));
  return verdict;
}

}  // namespace batchd::http

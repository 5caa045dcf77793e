// What a queued job's run came to, judged from its inputs' results alone, and the records a job
// ends with: pure, so the rules read apart from the jobs consumer's thread (jobs_consumer.cpp),
// which carries them out.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "client_lib/client.hpp"
#include "frontend/http_response.hpp"
#include "frontend/jobs_entry.hpp"

namespace batchd::http {

struct JobVerdict {
  enum class Kind : std::uint8_t {
    kAnswer,    // done or failed: store `record`, dead-lettering the entry when `dead_reason` says why
    kRunAgain,  // a transient failure: run the whole job again here, not counted as a delivery
    kGiveBack,  // transient too often: leave the entry for another delivery, here or elsewhere
  };
  Kind kind = Kind::kAnswer;
  bool shrink_window = false;  // the daemon shed a run or timed it out: it had less room than assumed
  std::string record;          // kAnswer
  std::string dead_reason;     // kAnswer: empty when the job is done
  std::string why;             // kGiveBack: the failure, for the log
};

// `results[i]` answers `job.inputs[i]` (every one set; the outputs are moved out). `runs`: this
// job's runs on this node, this one included. Shed, the daemon gone or the model without a lane:
// run again up to 7 times more; timed out: once more (an input that hangs should not hold the
// daemon for many timeouts). An input that fails for good fails the job (poison: dead-lettered).
JobVerdict judge_job(const JobEntry& job, std::span<std::optional<Result>> results, std::uint32_t runs);

// A failure that another try may not meet.
bool transient_failure(ErrorCode code) noexcept;

// The record of a job that ended failed with `error`, or expired because of `why`.
std::string failed_record(std::string_view id, const Response& error);
std::string failed_record(std::string_view id, const Error& error);
std::string expired_record(std::string_view id, const std::string& why);

}  // namespace batchd::http

// The jobs queue's layout in Redis (docs/JOBS.md), shared by batchd-http, which writes and consumes
// it, and batchctl jobs, which shows and mends it.
#pragma once

#include <string_view>

namespace batchd::redis {

// One stream per model and class, batchd:jobs:{model}:{high|normal|low}; every node's consumer
// is a member of kJobsGroup on each.
inline constexpr std::string_view kJobsStreamPrefix = "batchd:jobs:";
inline constexpr std::string_view kJobsGroup = "batchd";
// Where entries that cannot be answered go, with the reason (one stream for every model).
inline constexpr std::string_view kJobsDeadStream = "batchd:jobs:dead";
// Where a model's answers are published, for a service that reads them instead of polling
// (batchd-http --jobs-results-stream): batchd:results:{model}.
inline constexpr std::string_view kJobsResultsPrefix = "batchd:results:";
// A job's record (its state and result), polled by id: batchd:job:{id}.
inline constexpr std::string_view kJobRecordPrefix = "batchd:job:";
// A record's first byte: its state (frontend/jobs_store.hpp, JobState).
inline constexpr char kPendingState = 'P';

}  // namespace batchd::redis

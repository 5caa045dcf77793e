// A job as it waits in a Redis stream (docs/JOBS.md, "The entry format"): the fields batchd-http
// writes with XADD, and the checks every entry passes before it runs, since any Redis client may
// write into the stream. Free of I/O, like jobs_api.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "client_lib/client.hpp"
#include "redis/jobs_keys.hpp"

namespace batchd::http {

using redis::kJobRecordPrefix;
using redis::kJobsDeadStream;
using redis::kJobsGroup;
using redis::kJobsStreamPrefix;

std::string jobs_stream_key(std::string_view model, Priority priority);
std::string job_record_key(std::string_view id);

struct JobEntry {
  std::string id;  // 32 lower-case hex digits
  std::vector<std::string> inputs;
  bool many = false;                   // given as "inputs": answered with "outputs"
  std::chrono::milliseconds timeout{};  // each input's run; 0: the node's default
  std::int64_t deadline_ms = 0;         // Unix time by which it must start; 0: none
  bool has_record = false;              // batchd-http stored its pending record at submission
};

struct JobEntryLimits {
  std::uint32_t max_inputs = 256;
  std::uint32_t max_input_bytes = 0;  // 0: not checked here (the daemon checks)
  std::chrono::milliseconds max_timeout{60000};
};

using EntryField = std::pair<std::string, std::string>;

// The fields XADD writes for `job`: "id", "input" (one input, not many) or "inputs" (a JSON array
// of strings), and "timeout_ms", "deadline_ms" and "record" where they say something.
std::vector<EntryField> job_entry_fields(const JobEntry& job);

// Reads an entry's fields as untrusted input: the job, or why it cannot run, for a person and
// the dead-letter stream (a missing or repeated field, a bad id, an input that is not UTF-8 or
// is too large, malformed JSON, a bad number). Unknown fields are ignored, so producers may add
// their own.
std::variant<JobEntry, std::string> parse_job_entry(std::span<const EntryField> fields, const JobEntryLimits& limits);

// The job id an entry names, if it names a well-formed one (a malformed entry's job can still
// be failed by id).
std::string_view job_id_of(std::span<const EntryField> fields) noexcept;

}  // namespace batchd::http

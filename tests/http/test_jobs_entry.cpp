// The jobs queue's entry format (frontend/jobs_entry.hpp): what batchd-http writes reads back as
// the same job, and every way another producer's entry can be wrong is named, not guessed at.
#include <doctest/doctest.h>

#include <string>
#include <variant>
#include <vector>

#include "frontend/jobs_entry.hpp"

using namespace batchd;
using namespace batchd::http;

namespace {

const std::string kId = "0123456789abcdef0123456789abcdef";

std::vector<EntryField> fields(std::initializer_list<std::pair<const char*, std::string>> list) {
  std::vector<EntryField> out;
  for (const auto& [name, value] : list) out.emplace_back(name, value);
  return out;
}

std::string reason(const std::vector<EntryField>& f, const JobEntryLimits& limits = {}) {
  auto parsed = parse_job_entry(f, limits);
  const std::string* why = std::get_if<std::string>(&parsed);
  return why != nullptr ? *why : std::string("(parsed)");
}

}  // namespace

TEST_CASE("an entry batchd-http writes reads back as the same job") {
  JobEntry job;
  job.id = kId;
  job.inputs = {"plain", "quote \" and \\ and \n and é", ""};
  job.many = true;
  job.timeout = std::chrono::milliseconds(2500);
  job.deadline_ms = 1'800'000'000'000;
  job.has_record = true;
  auto parsed = parse_job_entry(job_entry_fields(job), {});
  REQUIRE(std::holds_alternative<JobEntry>(parsed));
  const JobEntry& back = std::get<JobEntry>(parsed);
  CHECK(back.id == job.id);
  CHECK(back.inputs == job.inputs);
  CHECK(back.many);
  CHECK(back.timeout == job.timeout);
  CHECK(back.deadline_ms == job.deadline_ms);
  CHECK(back.has_record);

  JobEntry one;
  one.id = kId;
  one.inputs = {"alone"};
  const auto f = job_entry_fields(one);
  CHECK(f.size() == 2);  // id and input: nothing said that needs no saying
  CHECK(f[1] == EntryField{"input", "alone"});
  auto single = parse_job_entry(f, {});
  REQUIRE(std::holds_alternative<JobEntry>(single));
  CHECK_FALSE(std::get<JobEntry>(single).many);
  CHECK_FALSE(std::get<JobEntry>(single).has_record);
  CHECK(std::get<JobEntry>(single).deadline_ms == 0);
}

TEST_CASE("a producer's entry: unknown fields ignored, every fault named") {
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"trace", "mine"}})) == "(parsed)");
  CHECK(reason(fields({{"input", "x"}})) == R"(no "id" field)");
  CHECK(reason(fields({{"id", "ABC"}, {"input", "x"}})).starts_with(R"(field "id" is not 32 lower-case hex digits)"));
  CHECK(reason(fields({{"id", kId}})) == R"(no "input" or "inputs" field)");
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"inputs", "[]"}})) == R"(both "input" and "inputs" are given)");
  CHECK(reason(fields({{"id", kId}, {"id", kId}, {"input", "x"}})) == R"(field "id" is given twice)");
  CHECK(reason(fields({{"id", kId}, {"input", std::string("\xc3\x28", 2)}})) == "the input is not valid UTF-8");
  CHECK(reason(fields({{"id", kId}, {"inputs", "[\"a\",\"\\ud800\"]"}})).find("not") != std::string::npos);
  CHECK(reason(fields({{"id", kId}, {"inputs", "{}"}})) == R"(field "inputs" is not a JSON array)");
  CHECK(reason(fields({{"id", kId}, {"inputs", "[]"}})) == R"(field "inputs" is an empty array)");
  CHECK(reason(fields({{"id", kId}, {"inputs", "[1]"}})) == R"(field "inputs" holds something not a string)");
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"timeout_ms", "0"}})).starts_with(R"(field "timeout_ms")"));
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"timeout_ms", "60001"}})).starts_with(R"(field "timeout_ms")"));
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"timeout_ms", "+5"}})).starts_with(R"(field "timeout_ms")"));
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"deadline_ms", "1e12"}})).starts_with(R"(field "deadline_ms")"));
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"deadline_ms", "99999999999999999999"}}))
            .starts_with(R"(field "deadline_ms")"));
  CHECK(reason(fields({{"id", kId}, {"input", "x"}, {"record", "yes"}})) == R"(field "record" is neither "0" nor "1")");
  // A reason quotes at most 32 bytes of what it got, escaped.
  const std::string long_id(1000, '\n');
  const std::string why = reason(fields({{"id", long_id}, {"input", "x"}}));
  CHECK(why.size() < 260);  // 32 bytes at most, each escaped in at most 6
  CHECK(why.find('\n') == std::string::npos);
}

TEST_CASE("limits: inputs per job and bytes per input") {
  JobEntryLimits limits;
  limits.max_inputs = 2;
  limits.max_input_bytes = 4;
  CHECK(reason(fields({{"id", kId}, {"inputs", R"(["a","b","c"])"}}), limits) ==
        R"(field "inputs" holds 3 inputs, over the limit of 2)");
  CHECK(reason(fields({{"id", kId}, {"input", "12345"}}), limits) ==
        "the input has 5 bytes, over the daemon's limit of 4");
  CHECK(reason(fields({{"id", kId}, {"inputs", R"(["a","12345"])"}}), limits) ==
        "input 1 has 5 bytes, over the daemon's limit of 4");
  CHECK(reason(fields({{"id", kId}, {"inputs", R"(["a","1234"])"}}), limits) == "(parsed)");
}

TEST_CASE("stream and record keys") {
  CHECK(jobs_stream_key("batchstring", Priority::kHigh) == "batchd:jobs:batchstring:high");
  CHECK(jobs_stream_key("m", Priority::kLow) == "batchd:jobs:m:low");
  CHECK(job_record_key(kId) == "batchd:job:" + kId);
  CHECK(job_id_of(fields({{"input", "x"}, {"id", kId}})) == kId);
  CHECK(job_id_of(fields({{"id", "nope"}})).empty());
}

#include "frontend/jobs_entry.hpp"

#include <simdjson.h>

#include <charconv>
#include <optional>

#include "frontend/jobs_api.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace {

// Digits only, no sign: what a producer's XADD can get wrong is said rather than guessed at.
std::optional<std::int64_t> parse_count(std::string_view text) {
  std::int64_t value = 0;
  if (text.empty() || text.size() > 18) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

std::string shown(std::string_view text) {
  std::string out;
  text::append_json_escaped_lossy(text.substr(0, 32), out);
  if (text.size() > 32) out.append("...");
  return out;
}

std::optional<std::string> check_input(std::string_view input, std::size_t index, bool many,
                                       const JobEntryLimits& limits) {
  const std::string where = many ? "input " + std::to_string(index) + " " : "the input ";
  if (!simdjson::validate_utf8(input.data(), input.size())) return where + "is not valid UTF-8";
  if (limits.max_input_bytes != 0 && input.size() > limits.max_input_bytes) {
    return where + "has " + std::to_string(input.size()) + " bytes, over the daemon's limit of " +
           std::to_string(limits.max_input_bytes);
  }
  return std::nullopt;
}

std::optional<std::string> read_inputs_json(std::string_view text, const JobEntryLimits& limits, JobEntry& job) {
  simdjson::dom::parser parser;
  simdjson::dom::array array;
  if (parser.parse(text.data(), text.size()).get_array().get(array) != simdjson::SUCCESS) {
    return R"(field "inputs" is not a JSON array)";
  }
  if (array.size() == 0) return R"(field "inputs" is an empty array)";
  if (array.size() > limits.max_inputs) {
    return R"(field "inputs" holds )" + std::to_string(array.size()) + " inputs, over the limit of " +
           std::to_string(limits.max_inputs);
  }
  job.inputs.reserve(array.size());
  for (const simdjson::dom::element item : array) {
    std::string_view input;
    if (item.get_string().get(input) != simdjson::SUCCESS) return R"(field "inputs" holds something not a string)";
    if (auto bad = check_input(input, job.inputs.size(), true, limits)) return bad;
    job.inputs.emplace_back(input);
  }
  job.many = true;
  return std::nullopt;
}

}  // namespace

std::string jobs_stream_key(std::string_view model, Priority priority) {
  std::string key(kJobsStreamPrefix);
  key.append(model);
  key.push_back(':');
  key.append(priority_name(priority));
  return key;
}

std::string job_record_key(std::string_view id) {
  std::string key(kJobRecordPrefix);
  key.append(id);
  return key;
}

std::vector<EntryField> job_entry_fields(const JobEntry& job) {
  std::vector<EntryField> fields;
  fields.emplace_back("id", job.id);
  if (!job.many && job.inputs.size() == 1) {
    fields.emplace_back("input", job.inputs.front());
  } else {
    std::string array = "[";
    for (std::size_t i = 0; i < job.inputs.size(); ++i) {
      if (i != 0) array.push_back(',');
      array.push_back('"');
      text::append_json_escaped(job.inputs[i], array);
      array.push_back('"');
    }
    array.push_back(']');
    fields.emplace_back("inputs", std::move(array));
  }
  if (job.timeout.count() > 0) fields.emplace_back("timeout_ms", std::to_string(job.timeout.count()));
  if (job.deadline_ms > 0) fields.emplace_back("deadline_ms", std::to_string(job.deadline_ms));
  if (job.has_record) fields.emplace_back("record", "1");
  return fields;
}

std::string_view job_id_of(std::span<const EntryField> fields) noexcept {
  for (const auto& [name, value] : fields) {
    if (name == "id") return valid_job_id(value) ? std::string_view(value) : std::string_view();
  }
  return {};
}

std::variant<JobEntry, std::string> parse_job_entry(std::span<const EntryField> fields, const JobEntryLimits& limits) {
  const EntryField* id = nullptr;
  const EntryField* input = nullptr;
  const EntryField* inputs = nullptr;
  const EntryField* timeout = nullptr;
  const EntryField* deadline = nullptr;
  const EntryField* record = nullptr;
  for (const EntryField& field : fields) {
    const EntryField** slot = field.first == "id"            ? &id
                              : field.first == "input"       ? &input
                              : field.first == "inputs"      ? &inputs
                              : field.first == "timeout_ms"  ? &timeout
                              : field.first == "deadline_ms" ? &deadline
                              : field.first == "record"      ? &record
                                                             : nullptr;
    if (slot == nullptr) continue;
    if (*slot != nullptr) return "field \"" + field.first + "\" is given twice";
    *slot = &field;
  }
  JobEntry job;
  if (id == nullptr) return R"(no "id" field)";
  if (!valid_job_id(id->second)) return R"(field "id" is not 32 lower-case hex digits: ")" + shown(id->second) + "\"";
  job.id = id->second;
  if (input != nullptr && inputs != nullptr) return R"(both "input" and "inputs" are given)";
  if (input == nullptr && inputs == nullptr) return R"(no "input" or "inputs" field)";
  if (input != nullptr) {
    if (auto bad = check_input(input->second, 0, false, limits)) return *bad;
    job.inputs.push_back(input->second);
  } else if (auto bad = read_inputs_json(inputs->second, limits, job)) {
    return *bad;
  }
  if (timeout != nullptr) {
    const auto ms = parse_count(timeout->second);
    if (!ms || *ms == 0 || *ms > limits.max_timeout.count()) {
      return R"(field "timeout_ms" is not a whole number of milliseconds from 1 to )" +
             std::to_string(limits.max_timeout.count()) + ": \"" + shown(timeout->second) + "\"";
    }
    job.timeout = std::chrono::milliseconds(*ms);
  }
  if (deadline != nullptr) {
    const auto ms = parse_count(deadline->second);
    if (!ms || *ms == 0) {
      return R"(field "deadline_ms" is not a Unix time in milliseconds: ")" + shown(deadline->second) + "\"";
    }
    job.deadline_ms = *ms;
  }
  if (record != nullptr) {
    if (record->second != "0" && record->second != "1") return R"(field "record" is neither "0" nor "1")";
    job.has_record = record->second == "1";
  }
  return job;
}

}  // namespace batchd::http

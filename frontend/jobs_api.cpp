#include "frontend/jobs_api.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <system_error>

#include "text/ascii.hpp"
#include "text/json_escape.hpp"

namespace batchd::http {

namespace beast_http = boost::beast::http;

namespace {

void append_id_and_status(std::string& out, std::string_view id, std::string_view status) {
  out.append(R"({"id":")");
  out.append(id);  // ids are hex: nothing to escape
  out.append(R"(","status":")");
  out.append(status);
  out.push_back('"');
}

}  // namespace

bool is_jobs_target(std::string_view target) noexcept {
  const std::string_view path = path_of(target);
  return path == kJobsPath || (path.starts_with(kJobsPath) && path.size() > kJobsPath.size() &&
                               path[kJobsPath.size()] == '/');
}

JobsApi::JobsApi(const ApiLimits& limits, std::uint32_t max_inputs, std::chrono::seconds max_deadline,
                 ApiContext& context)
    : limits_(limits), max_inputs_(max_inputs), max_deadline_(max_deadline), context_(context),
      json_(std::max<std::size_t>(limits.max_body_bytes, 64)) {}

JobsAction JobsApi::route(const Request& request) {
  const std::string_view path = path_of(std::string_view(request.target().data(), request.target().size()));
  if (path == kJobsPath || path.size() == kJobsPath.size() + 1) {  // "/v1/jobs" or "/v1/jobs/"
    if (request.method() != beast_http::verb::post) return method_not_allowed("POST");
    return submit(request);
  }
  const std::string_view id = path.substr(kJobsPath.size() + 1);
  const auto method = request.method();
  if (method != beast_http::verb::get && method != beast_http::verb::head && method != beast_http::verb::delete_) {
    return method_not_allowed("GET, HEAD, DELETE");
  }
  if (!valid_job_id(id)) return job_not_found(id);
  if (method == beast_http::verb::delete_) return JobDelete{std::string(id)};
  return JobPoll{std::string(id)};
}

JobsAction JobsApi::submit(const Request& request) {
  JobSubmit job;
  if (auto refused = read_timeout(request, limits_, job.timeout)) return std::move(*refused);
  std::optional<Priority> priority;
  if (auto refused = read_header_priority(request, priority)) return std::move(*refused);
  simdjson::dom::object root;
  if (auto refused = read_json_object(json_, request.body(), R"({"input": "..."} or {"inputs": [...]})", root)) {
    return std::move(*refused);
  }
  if (auto refused = read_inputs(root, job)) return std::move(*refused);
  if (auto refused = read_json_priority(root, priority)) return std::move(*refused);
  if (auto refused = read_deadline(request, root, job)) return std::move(*refused);
  job.priority = priority.value_or(Priority::kNormal);
  simdjson::dom::element model;
  if (root.at_key("model").get(model) == simdjson::SUCCESS) {
    std::string_view name;
    if (model.get_string().get(name) != simdjson::SUCCESS || name.empty()) {
      return error_response(400, "bad_request", R"("model" must be a JSON string naming a model)");
    }
    job.model = name;
  }
  const std::uint32_t max_input = context_.max_input_bytes();
  for (const std::string& input : job.inputs) {
    if (max_input != 0 && input.size() > max_input) {
      return error_response(413, "too_large", "an input exceeds the daemon's limit of " +
                                                  std::to_string(max_input) + " bytes");
    }
  }
  return job;
}

std::optional<Response> JobsApi::read_inputs(simdjson::dom::object root, JobSubmit& job) {
  simdjson::dom::element field;
  if (root.at_key("input").get(field) == simdjson::SUCCESS) {
    if (root.at_key("inputs").error() == simdjson::SUCCESS) {
      return error_response(400, "bad_request", R"(give "input" or "inputs", not both)");
    }
    std::string_view input;
    if (field.get_string().get(input) != simdjson::SUCCESS) {
      return error_response(400, "bad_request", R"("input" must be a JSON string)");
    }
    job.inputs.emplace_back(input);
    return std::nullopt;
  }
  if (root.at_key("inputs").get(field) != simdjson::SUCCESS) {
    return error_response(400, "missing_field", R"(the JSON object has no "input" or "inputs" field)");
  }
  simdjson::dom::array inputs;
  if (field.get_array().get(inputs) != simdjson::SUCCESS || inputs.size() == 0) {
    return error_response(400, "bad_request", R"("inputs" must be a non-empty JSON array of strings)");
  }
  if (inputs.size() > max_inputs_) {
    return error_response(413, "too_large", "a job takes at most " + std::to_string(max_inputs_) + " inputs");
  }
  job.many = true;
  job.inputs.reserve(inputs.size());
  for (const simdjson::dom::element item : inputs) {
    std::string_view input;
    if (item.get_string().get(input) != simdjson::SUCCESS) {
      return error_response(400, "bad_request", R"("inputs" must hold JSON strings only)");
    }
    job.inputs.emplace_back(input);
  }
  return std::nullopt;
}

std::optional<Response> JobsApi::read_deadline(const Request& request, simdjson::dom::object root,
                                               JobSubmit& job) const {
  const std::string bad = "a job's deadline (\"deadline_s\" or X-Job-Deadline-S) must be a whole number of "
                          "seconds from 1 to " + std::to_string(max_deadline_.count());
  std::optional<std::uint64_t> seconds;
  simdjson::dom::element field;
  if (root.at_key("deadline_s").get(field) == simdjson::SUCCESS) {
    std::uint64_t value = 0;
    if (field.get_uint64().get(value) != simdjson::SUCCESS) return error_response(400, "bad_deadline", bad);
    seconds = value;
  }
  if (const auto it = request.find("X-Job-Deadline-S"); it != request.end()) {
    const std::string_view text = text::trim(std::string_view(it->value().data(), it->value().size()));
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return error_response(400, "bad_deadline", bad);
    if (seconds && *seconds != value) {
      return error_response(400, "bad_deadline", "the body's \"deadline_s\" and X-Job-Deadline-S disagree");
    }
    seconds = value;
  }
  if (!seconds) return std::nullopt;
  if (*seconds == 0 || *seconds > static_cast<std::uint64_t>(max_deadline_.count())) {
    return error_response(400, "bad_deadline", bad);
  }
  job.deadline = std::chrono::seconds(*seconds);
  return std::nullopt;
}

Response job_not_found(std::string_view id) {
  std::string message = "no such job: ";
  message.append(id.substr(0, 64));  // whatever the caller sent, not echoed whole
  message.append(" (never submitted, expired, or deleted)");
  return error_response(404, "job_not_found", message);
}

std::string new_job_id() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (std::size_t i = 0; i < sizeof(bytes); ++i) {
    id[2 * i] = kHex[bytes[i] >> 4];
    id[2 * i + 1] = kHex[bytes[i] & 0xF];
  }
  return id;
}

bool valid_job_id(std::string_view id) noexcept {
  if (id.size() != 32) return false;
  for (const char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string job_pending_body(std::string_view id) {
  std::string body;
  append_id_and_status(body, id, "pending");
  body.push_back('}');
  return body;
}

std::string job_done_body(std::string_view id, std::span<const std::string> outputs, bool many) {
  std::string body;
  std::size_t bytes = 64;
  for (const std::string& output : outputs) bytes += output.size() + 4;
  body.reserve(bytes);
  append_id_and_status(body, id, "done");
  if (!many) {
    body.append(R"(,"output":")");
    text::append_json_escaped(outputs.empty() ? std::string_view() : std::string_view(outputs.front()), body);
    body.append("\"}");
    return body;
  }
  body.append(R"(,"outputs":[)");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (i != 0) body.push_back(',');
    body.push_back('"');
    text::append_json_escaped(outputs[i], body);
    body.push_back('"');
  }
  body.append("]}");
  return body;
}

std::string job_failed_body(std::string_view id, const Response& error) { return job_error_body(id, "failed", error); }

std::string job_error_body(std::string_view id, std::string_view status, const Response& error) {
  std::string body;
  append_id_and_status(body, id, status);
  // The error body is {"error":{...}}: its members follow the id and status as they are.
  body.push_back(',');
  body.append(std::string_view(error.body).substr(1));
  return body;
}

std::string job_deleted_body(std::string_view id, std::string_view status) {
  std::string body;
  append_id_and_status(body, id, status);
  body.push_back('}');
  return body;
}

}  // namespace batchd::http

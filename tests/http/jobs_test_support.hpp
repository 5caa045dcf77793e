// Shared by the jobs tests: reading a job's JSON answer, and submitting and polling over one
// keep-alive connection.
#pragma once

#include <doctest/doctest.h>
#include <simdjson.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/http/http_test_support.hpp"
#include "text/json_escape.hpp"

namespace batchd::test {

// What a job's body says (POST's 202, GET's 200, DELETE's 200).
struct JobView {
  std::string id;
  std::string status;  // pending, done, failed, cancelled, deleted; "" if the body is no job
  std::string output;
  std::vector<std::string> outputs;
  std::string error_code;
};

inline JobView parse_job(const std::string& body) {
  JobView job;
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (parser.parse(body).get_object().get(root) != simdjson::SUCCESS) return job;
  std::string_view text;
  if (root["id"].get_string().get(text) == simdjson::SUCCESS) job.id = text;
  if (root["status"].get_string().get(text) == simdjson::SUCCESS) job.status = text;
  if (root["output"].get_string().get(text) == simdjson::SUCCESS) job.output = text;
  simdjson::dom::array outputs;
  if (root["outputs"].get_array().get(outputs) == simdjson::SUCCESS) {
    for (const auto item : outputs) {
      if (item.get_string().get(text) == simdjson::SUCCESS) job.outputs.emplace_back(text);
    }
  }
  if (root["error"]["code"].get_string().get(text) == simdjson::SUCCESS) job.error_code = text;
  return job;
}

inline std::string json_string(std::string_view text) {
  std::string out = "\"";
  text::append_json_escaped(text, out);
  out.push_back('"');
  return out;
}

// POST /v1/jobs with {"input": input}.
inline std::string job_request(std::string_view input, const std::vector<std::string>& headers = {}) {
  return make_request("POST", "/v1/jobs", "{\"input\":" + json_string(input) + "}", headers);
}

// POST /v1/jobs with {"inputs": [...]}.
inline std::string jobs_request(const std::vector<std::string>& inputs) {
  std::string body = "{\"inputs\":[";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i != 0) body.push_back(',');
    body.append(json_string(inputs[i]));
  }
  body.append("]}");
  return make_request("POST", "/v1/jobs", body);
}

inline std::string poll_request(const std::string& id) { return make_request("GET", "/v1/jobs/" + id); }

// Polls a job on `client` until it is no longer pending (or the timeout ends) and returns the last
// answer.
inline HttpResponse poll_until_finished(HttpClient& client, const std::string& id,
                                        std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = client.round_trip(poll_request(id));
    REQUIRE(r.has_value());
    if (r->status != 200 || parse_job(r->body).status != "pending" || std::chrono::steady_clock::now() > until) {
      return *r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace batchd::test

#include "tools/stress_input_file.hpp"

#include <simdjson.h>

#include <fstream>

namespace batchd::stress {

namespace {

Failure bad_line(const std::string& path, std::size_t line, const std::string& why) {
  return make_failure(std::errc::invalid_argument, path + ":" + std::to_string(line) + ": " + why);
}

}  // namespace

Expected<std::vector<std::string>> read_input_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_failure("--input-file " + path);
  std::vector<std::string> inputs;
  simdjson::dom::parser parser;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    if (!line.starts_with('{')) {
      if (!simdjson::validate_utf8(line.data(), line.size())) return bad_line(path, number, "not valid UTF-8");
      inputs.push_back(std::move(line));
      continue;
    }
    simdjson::dom::element root;
    std::string_view input;
    if (parser.parse(line).get(root) != simdjson::SUCCESS ||
        root.get_object().at_key("input").get_string().get(input) != simdjson::SUCCESS) {
      return bad_line(path, number, "a line starting with '{' must be a JSON object with a string \"input\"");
    }
    inputs.emplace_back(input);  // simdjson has checked it is UTF-8
  }
  if (in.bad()) return errno_failure("--input-file " + path);
  if (inputs.empty()) return make_failure(std::errc::invalid_argument, path + ": no inputs in the file");
  return inputs;
}

}  // namespace batchd::stress

#include "tools/stress_input_file.hpp"

#include <simdjson.h>

#include <fstream>
#include <unordered_map>

namespace batchd::stress {

namespace {

Failure bad_line(const std::string& path, std::size_t line, const std::string& why) {
  return make_failure(std::errc::invalid_argument, path + ":" + std::to_string(line) + ": " + why);
}

}  // namespace

Expected<InputFile> read_input_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errno_failure("--input-file " + path);
  InputFile file;
  std::unordered_map<std::string_view, std::size_t> first_of;  // input -> its first line's index
  simdjson::dom::parser parser;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    std::string_view output;
    bool has_output = false;
    if (!line.starts_with('{')) {
      if (!simdjson::validate_utf8(line.data(), line.size())) return bad_line(path, number, "not valid UTF-8");
      file.inputs.push_back(std::move(line));
    } else {
      simdjson::dom::element root;
      std::string_view input;
      if (parser.parse(line).get(root) != simdjson::SUCCESS ||
          root.get_object().at_key("input").get_string().get(input) != simdjson::SUCCESS) {
        return bad_line(path, number, "a line starting with '{' must be a JSON object with a string \"input\"");
      }
      has_output = root.get_object().at_key("output").get_string().get(output) == simdjson::SUCCESS;
      file.inputs.emplace_back(input);  // simdjson has checked it is UTF-8
    }
    if (has_output != (number == 1 ? has_output : !file.outputs.empty())) {
      return bad_line(path, number, "either every line gives an \"output\" or none does");
    }
    if (has_output) file.outputs.emplace_back(output);
  }
  if (in.bad()) return errno_failure("--input-file " + path);
  if (file.inputs.empty()) return make_failure(std::errc::invalid_argument, path + ": no inputs in the file");
  for (std::size_t i = 0; i < file.outputs.size(); ++i) {
    const auto [it, fresh] = first_of.emplace(file.inputs[i], i);
    if (!fresh && file.outputs[it->second] != file.outputs[i]) {
      return bad_line(path, i + 1, "this input's \"output\" differs from an earlier line's");
    }
  }
  return file;
}

}  // namespace batchd::stress

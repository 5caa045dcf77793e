// --input-file FILE: real inputs to replay instead of random ones. One input per line, or JSON
// lines whose "input" field is the input (a line that starts with '{' is read as JSON, so an
// input containing newlines or starting with '{' itself goes as {"input": "..."}).
#pragma once

#include <string>
#include <vector>

#include "base/expected.hpp"

namespace batchd::stress {

// Every input in the file, in order; a failure names the line (not valid JSON, no string
// "input", not UTF-8) or says the file holds no input.
Expected<std::vector<std::string>> read_input_file(const std::string& path);

}  // namespace batchd::stress

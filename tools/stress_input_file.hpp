// --input-file FILE: real inputs to replay instead of random ones. One input per line, or JSON
// lines whose "input" field is the input (a line that starts with '{' is read as JSON, so an
// input containing newlines or starting with '{' itself goes as {"input": "..."}). JSON lines may
// also give the right answer, {"input": "...", "output": "..."}: then every line must, and the
// answers are checked against them (a user's model, whose answers no reference here computes).
#pragma once

#include <string>
#include <vector>

#include "base/expected.hpp"

namespace batchd::stress {

struct InputFile {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;  // empty, or one per input
};

// Every input in the file, in order, with its output if the file gives them; a failure names the
// line (not valid JSON, no string "input", not UTF-8, an "output" on some lines only, two outputs
// for one input) or says the file holds no input.
Expected<InputFile> read_input_file(const std::string& path);

}  // namespace batchd::stress

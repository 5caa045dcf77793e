// The TOML config file, read as command-line arguments: each key `max_wait_ms = 5` (or `[sim]`
// table key `devices = 4`) becomes `--max-wait-ms 5` (`--sim-devices 4`), so the file and the
// flags share one definition of every option, its checks and its help, and flags given on the
// command line override the file.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace batchd {

struct ConfigArgs {
  std::vector<std::string> args;           // in order, ready to precede argv
  std::map<std::string, unsigned> lines;   // flag name ("--max-wait-ms") -> line in the file
};

// Parses the file, or fails (EINVAL) with a message naming the file, the line and the reason (a
// TOML syntax error, or a value of a type no flag takes).
Expected<ConfigArgs> read_config_file(const std::string& path);

}  // namespace batchd

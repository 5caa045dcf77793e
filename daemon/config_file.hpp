// The TOML config file, read as command-line arguments: each key `max_wait_ms = 5` (or `[sim]`
// table key `devices = 4`) becomes `--max-wait-ms 5` (`--sim-devices 4`), so the file and the
// flags share one definition of every option, its checks and its help, and flags given on the
// command line override the file. Each [models.NAME] table (and its own [models.NAME.sim]) is
// read the same way, apart, as that model's flags.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/expected.hpp"

namespace batchd {

// One [models.NAME] table: its keys as flags too, to follow the top-level ones (which they
// override for that model). Its `version` is no flag.
struct ModelArgs {
  std::string name;
  std::string version;                     // empty: not given
  std::vector<std::string> args;
  std::map<std::string, unsigned> lines;
};

struct ConfigArgs {
  std::vector<std::string> args;           // in order, ready to precede argv
  std::map<std::string, unsigned> lines;   // flag name ("--max-wait-ms") -> line in the file
  std::vector<ModelArgs> models;           // by name (TOML tables are unordered)
};

// Parses the file, or fails (EINVAL) with a message naming the file, the line and the reason (a
// TOML syntax error, or a value of a type no flag takes).
Expected<ConfigArgs> read_config_file(const std::string& path);

}  // namespace batchd

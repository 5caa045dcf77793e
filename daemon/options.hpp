// The daemon's options: one CLI11 definition serves the command line and the TOML config file
// (--config FILE), with flags given on the command line overriding the file.
#pragma once

#include <string>
#include <vector>

#include "daemon/config.hpp"

namespace batchd {

struct DaemonOptions {
  DaemonConfig config;
  std::string config_path;  // --config, or empty
  std::string log_level = "info";
};

// Parses `args` (without the program name) and the config file it names. Returns -1 when the
// daemon should run; otherwise the process exit code, with what to print in `message` (the help
// text for --help; for a bad flag or config file, the reason, with the file's line).
int parse_daemon_options(const std::vector<std::string>& args, DaemonOptions& out, std::string& message);

}  // namespace batchd

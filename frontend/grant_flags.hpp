// The grant flags both front-ends take (--priority-tokens, --trusted-proxy,
// --default-max-priority), and the policy they make.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "frontend/priority_grants.hpp"

namespace batchd::grants {

struct GrantFlags {
  std::string tokens_file;
  std::vector<std::string> trusted_proxies;  // CIDRs
  std::string default_max = "normal";
  bool cache_by_credential = false;
};

// `grant_header` is how this front-end's callers present a trusted proxy's grant (an HTTP header,
// or gRPC metadata), for the help text.
void add_grant_flags(CLI::App& app, GrantFlags& flags, std::string_view grant_header);

// Reads the token file and checks the networks; throws std::runtime_error naming the bad one.
// Logs, once, who may use which class (never a token).
GrantPolicy make_grant_policy(const GrantFlags& flags, std::string_view program);

}  // namespace batchd::grants

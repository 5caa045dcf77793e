// The operator's token file (--priority-tokens): which bearer token or API key may use which
// priority class. TOML, one table per credential:
//
//   [[token]]
//   name = "ops"              # for logs; optional
//   token = "long random secret"
//   max_priority = "high"     # high, normal or low
//
// The file holds secrets: one that others than its owner may read is loaded with a warning.
#pragma once

#include <string>
#include <vector>

#include "frontend/priority_grants.hpp"

namespace batchd::grants {

// Reads and checks the file; throws std::runtime_error naming the file, the line and the fault
// (a missing or unknown key, an empty or duplicated token, a class that is none).
std::vector<TokenGrant> load_token_file(const std::string& path);

// A warning for a file whose mode lets its group or others read or write it; empty when there is
// nothing to say.
std::string token_file_mode_warning(const std::string& path, unsigned mode);

}  // namespace batchd::grants

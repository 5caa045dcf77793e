// A Backend that wraps a user's plug-in: a shared library behind the C ABI of
// backend/backend_plugin.h, selected with `--backend plugin:/path/libmine.so`.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace batchd {

// Opens `path` (dlopen RTLD_NOW | RTLD_LOCAL; a name without '/' is searched like any shared
// library), checks its ABI and calls its init(config). Returns the backend, which owns the
// library and the plug-in's state until destroyed; on failure returns nullptr and sets `why` to
// a message for a person that names the path. Not thread-safe with another load of the same
// library (init runs on the caller's thread).
std::unique_ptr<Backend> load_plugin_backend(const std::string& path, const std::string& config,
                                             std::string& why);

}  // namespace batchd

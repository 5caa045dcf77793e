// A Backend that wraps a user's plug-in: a shared library behind the C ABI of
// backend/backend_plugin.h, selected with `--backend plugin:/path/libmine.so`.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "base/expected.hpp"

namespace batchd {

// Opens `path` (dlopen RTLD_NOW | RTLD_LOCAL; a name without '/' is searched like any shared
// library), checks its ABI and calls its init(config). Returns the backend, which owns the
// library and the plug-in's state until destroyed. A failure's message names the path; its code
// is ENOEXEC when the library cannot be loaded or is no usable plug-in, EINVAL when its init
// refused the config, EPROTO when init reported impossible lanes. Not thread-safe with another
// load of the same library (init runs on the caller's thread).
Expected<std::unique_ptr<Backend>> load_plugin_backend(const std::string& path,
                                                       const std::string& config);

}  // namespace batchd

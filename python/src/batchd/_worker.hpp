// What the two halves of the batchd._batchd extension share: the worker's binding (_worker.cpp)
// is added to the module by _batchd.cpp, whose error classes it raises.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "client_lib/client.hpp"

namespace batchd::python {

// Raises the batchd.Error subclass for `code` with `message`.
[[noreturn]] void raise_error(ErrorCode code, const std::string& message);

void bind_worker(nanobind::module_& m);

}  // namespace batchd::python

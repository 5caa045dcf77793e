// The HTTP API's OpenAPI document (docs/openapi.yaml) as JSON, served at GET /openapi.json. The
// definition is generated from the YAML at build time (frontend/openapi_to_cpp.py), so what is
// served is the file.
#pragma once

#include <string_view>

namespace batchd::http {

std::string_view openapi_json() noexcept;

}  // namespace batchd::http

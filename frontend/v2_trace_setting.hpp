// Triton's trace extension over HTTP: GET or POST /v2/trace/setting (the global settings) and
// /v2/models/NAME/trace/setting (a model's), each setting a JSON string (trace_level a list of
// them), null in a POST clearing one. Free of I/O, as V2Api is.
#pragma once

#include <simdjson.h>

#include <string_view>

#include "frontend/http_api.hpp"
#include "tracing/trace_settings.hpp"

namespace batchd::http {

// `model` empty: the global settings; `settings` null: tracing is off in this process (a read
// says trace_level OFF; a change is refused with 403, saying how to turn it on).
Response v2_trace_setting(const Request& request, std::string_view model, tracing::TraceSettings* settings,
                          simdjson::dom::parser& json);

}  // namespace batchd::http

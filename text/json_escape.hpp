// Writing text into JSON string literals: the one escaper the HTTP front-end's responses,
// batchd-stress's requests and the daemon's dead-letter log share.
#pragma once

#include <string>
#include <string_view>

namespace batchd::text {

// Appends text as the inside of a JSON string literal: '"', '\' and control characters are
// escaped (as \u00XX), every other byte is copied unchanged. Allocates only to grow out.
// Precondition: text is valid UTF-8 (a JSON string cannot carry other bytes).
void append_json_escaped(std::string_view text, std::string& out);

// The same for text that need not be UTF-8 (a backend's error message): valid UTF-8 is escaped
// as above; otherwise its ASCII is kept and every other byte shows as '?', so the result is
// always a valid JSON string.
void append_json_escaped_lossy(std::string_view text, std::string& out);

}  // namespace batchd::text

#include "text/json_escape.hpp"

#include <simdjson.h>

namespace batchd::text {

void append_json_escaped(std::string_view text, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::size_t run = 0;  // start of the bytes not yet copied: copied in runs, not byte by byte
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte != '"' && byte != '\\') continue;
    out.append(text.data() + run, i - run);
    run = i + 1;
    if (byte == '"' || byte == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(byte));
    } else {
      // \u00XX covers every control character; the short forms would only save bytes.
      out.append("\\u00");
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xF]);
    }
  }
  out.append(text.data() + run, text.size() - run);
}

void append_json_escaped_lossy(std::string_view text, std::string& out) {
  if (simdjson::validate_utf8(text.data(), text.size())) {
    append_json_escaped(text, out);
    return;
  }
  std::string ascii(text);
  for (char& c : ascii) {
    if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  }
  append_json_escaped(ascii, out);
}

}  // namespace batchd::text

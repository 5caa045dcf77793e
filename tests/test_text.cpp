// text/: JSON string escaping and HTTP's ASCII rules, shared by batchd-http and batchd-stress.
#include <doctest/doctest.h>

#include <string>

#include "text/ascii.hpp"
#include "text/json_escape.hpp"

namespace text = batchd::text;

TEST_CASE("JSON escaping: quote, backslash and control characters; UTF-8 unchanged") {
  std::string out = "x";
  text::append_json_escaped("a\"b\\c\n\x01\x1f\x7f", out);
  CHECK(out == "xa\\\"b\\\\c\\u000a\\u0001\\u001f\x7f");
  out.clear();
  text::append_json_escaped("h\xc3\xa9llo \xf0\x9f\x98\x80", out);
  CHECK(out == "h\xc3\xa9llo \xf0\x9f\x98\x80");
  out.clear();
  text::append_json_escaped(std::string_view("\0z", 2), out);
  CHECK(out == "\\u0000z");
}

TEST_CASE("lossy JSON escaping: valid UTF-8 as is; otherwise ASCII kept and every other byte '?'") {
  std::string out;
  text::append_json_escaped_lossy("h\xc3\xa9 \"q\"", out);
  CHECK(out == "h\xc3\xa9 \\\"q\\\"");
  out.clear();
  text::append_json_escaped_lossy("bad \xff\xc3 byte\n", out);
  CHECK(out == "bad ?? byte\\u000a");
}

TEST_CASE("iequals folds ASCII letters only, trim strips spaces and tabs") {
  CHECK(text::iequals("Content-Length", "content-LENGTH"));
  CHECK_FALSE(text::iequals("close", "closed"));
  CHECK_FALSE(text::iequals("@", "`"));  // 0x40 and 0x60 differ by the case bit, but are not letters
  CHECK_FALSE(text::iequals("\xc3\xa9", "\xc3\x89"));  // é and É: not ASCII, compared as bytes
  CHECK(text::trim(" \t keep-alive \t") == "keep-alive");
  CHECK(text::trim(" \t ").empty());
  static_assert(text::iequals("A", "a") && text::trim(" x ") == "x");
}

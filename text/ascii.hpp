// The ASCII rules HTTP's header names, tokens and whitespace follow, and the printable form of a
// peer's message. Locale-free on purpose: a process's locale must not change how a header is read.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace batchd::text {

// 'A'..'Z' to 'a'..'z'; every other byte unchanged.
constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Equal but for the case of ASCII letters.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return ascii_lower(x) == ascii_lower(y);
         });
}

// Without leading and trailing spaces and tabs (HTTP's optional whitespace, RFC 9110 5.6.3).
constexpr std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A message a peer wrote (a plug-in, a worker), for callers and logs: up to its first NUL, without
// trailing newlines and spaces, every byte outside printable ASCII shown as '?'.
inline std::string printable(std::string_view raw) {
  std::string message(raw.substr(0, std::min(raw.find('\0'), raw.size())));
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  for (char& c : message) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return message;
}

}  // namespace batchd::text

#include "client_lib/traceparent.hpp"

#include <cstdint>
#include <span>

namespace batchd {
namespace {

// Lowercase hex only, as the specification writes: an uppercase one is not a traceparent.
int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool read_hex(std::string_view text, std::span<std::uint8_t> out) noexcept {
  if (text.size() != out.size() * 2) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int high = hex_value(text[2 * i]);
    const int low = hex_value(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<std::uint8_t>(high << 4 | low);
  }
  return true;
}

void append_hex(std::string& out, std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (const std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xF]);
  }
}

}  // namespace

std::optional<TraceParent> parse_traceparent(std::string_view value) noexcept {
  // version(2) '-' trace-id(32) '-' parent-id(16) '-' flags(2)
  constexpr std::size_t kLength = 55;
  if (value.size() < kLength || value[2] != '-' || value[35] != '-' || value[52] != '-') return std::nullopt;
  std::uint8_t version = 0;
  if (!read_hex(value.substr(0, 2), std::span(&version, 1)) || version == 0xFF) return std::nullopt;
  if (version == 0 ? value.size() != kLength : value.size() > kLength && value[kLength] != '-') return std::nullopt;
  TraceParent out;
  std::uint8_t flags = 0;
  if (!read_hex(value.substr(3, 32), out.context.trace_id) || !read_hex(value.substr(36, 16), out.context.span_id) ||
      !read_hex(value.substr(53, 2), std::span(&flags, 1)) || !out.context.valid()) {
    return std::nullopt;
  }
  out.sampled = (flags & 0x01) != 0;
  return out;
}

std::string format_traceparent(const shm::TraceContext& context, bool sampled) {
  std::string out = "00-";
  out.reserve(55);
  append_hex(out, context.trace_id);
  out.push_back('-');
  append_hex(out, context.span_id);
  out.append(sampled ? "-01" : "-00");
  return out;
}

}  // namespace batchd

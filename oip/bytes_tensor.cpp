#include "oip/bytes_tensor.hpp"

#include <cstring>

namespace batchd::oip {

namespace {

constexpr std::size_t kLengthBytes = 4;

std::uint32_t read_le32(const char* p) noexcept {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return std::uint32_t{u[0]} | (std::uint32_t{u[1]} << 8) | (std::uint32_t{u[2]} << 16) | (std::uint32_t{u[3]} << 24);
}

}  // namespace

std::optional<std::string> decode_bytes_elements(std::string_view data, std::size_t expected,
                                                 std::vector<std::string_view>& out) {
  const std::size_t first = out.size();
  std::size_t at = 0;
  for (std::size_t i = 0; i < expected; ++i) {
    if (data.size() - at < kLengthBytes) {
      out.resize(first);
      return "BYTES element " + std::to_string(i) + " of " + std::to_string(expected) +
             ": its 4-byte length runs past the end of the data (" + std::to_string(data.size()) + " bytes)";
    }
    const std::uint32_t length = read_le32(data.data() + at);
    at += kLengthBytes;
    // Compared as a remainder, so a claim near 4 GiB cannot overflow the offset.
    if (length > data.size() - at) {
      out.resize(first);
      return "BYTES element " + std::to_string(i) + " claims " + std::to_string(length) + " bytes but only " +
             std::to_string(data.size() - at) + " remain";
    }
    out.emplace_back(data.data() + at, length);
    at += length;
  }
  if (at != data.size()) {
    out.resize(first);
    return std::to_string(data.size() - at) + " bytes are left after the " + std::to_string(expected) +
           " BYTES elements the shape holds";
  }
  return std::nullopt;
}

void append_bytes_element(std::string& out, std::string_view element) {
  const auto length = static_cast<std::uint32_t>(element.size());
  const char prefix[kLengthBytes] = {static_cast<char>(length & 0xFF), static_cast<char>((length >> 8) & 0xFF),
                                     static_cast<char>((length >> 16) & 0xFF), static_cast<char>(length >> 24)};
  out.append(prefix, kLengthBytes);
  out.append(element);
}

std::size_t framed_size(std::size_t elements, std::size_t total_bytes) noexcept {
  return elements * kLengthBytes + total_bytes;
}

}  // namespace batchd::oip

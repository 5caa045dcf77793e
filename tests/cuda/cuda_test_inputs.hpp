// Random inputs for the CUDA tests: exact byte lengths, with ASCII, multi-byte UTF-8 (2-, 3- and
// 4-byte sequences) and arbitrary bytes mixed, flattened into a BatchInput the way the daemon
// hands batches to a backend.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"

namespace batchd::cuda_test {

// Exactly `length` bytes. Multi-byte characters are only started where they fit, so a string
// is valid UTF-8 unless the raw-byte branch was drawn.
inline std::string random_input(std::mt19937_64& rng, std::size_t length) {
  static constexpr std::string_view kUtf8[] = {"\xc3\xa9", "\xe2\x82\xac", "\xe4\xb8\xad",
                                               "\xf0\x9f\x98\x80", "\xd0\x96"};
  std::string text;
  text.reserve(length);
  while (text.size() < length) {
    const std::uint64_t pick = rng() % 8;
    const std::string_view multi = kUtf8[rng() % std::size(kUtf8)];
    if (pick < 2 && text.size() + multi.size() <= length) {
      text += multi;
    } else if (pick == 2) {
      text += static_cast<char>(rng() & 0xFF);  // any byte: the hash must not care
    } else {
      text += static_cast<char>(' ' + rng() % 95);
    }
  }
  return text;
}

// A batch in the flat layout of BatchInput; owns its bytes.
struct FlatBatch {
  std::vector<char> bytes;
  std::vector<std::uint32_t> offsets{0};

  void add(std::string_view input) {
    bytes.insert(bytes.end(), input.begin(), input.end());
    offsets.push_back(static_cast<std::uint32_t>(bytes.size()));
  }
  [[nodiscard]] BatchInput view() const { return {{bytes.data(), bytes.size()}, {offsets}}; }
};

}  // namespace batchd::cuda_test

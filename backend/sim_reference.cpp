#include "backend/sim_reference.hpp"

namespace batchd {

std::string sim_expected_output(std::string_view input, unsigned repeat) {
  std::string reversed;
  reversed.reserve(input.size());
  // Walk code points from the end: a code point starts at any byte that is not 10xxxxxx.
  std::size_t end = input.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(input[start]) & 0xC0) == 0x80) --start;
    reversed.append(input.substr(start, end - start));
    end = start;
  }
  std::string out;
  out.reserve(reversed.size() * repeat);
  for (unsigned i = 0; i < repeat; ++i) out += reversed;
  return out;
}

}  // namespace batchd

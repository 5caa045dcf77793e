// The Open Inference Protocol's framing of a BYTES tensor as raw bytes: each element is a 4-byte
// little-endian length, then that many bytes. HTTP's binary tensor data extension and gRPC's
// raw_input_contents / raw_output_contents both use it, so both front-ends share this codec.
// The bytes come from a peer: decoding checks every length against what is really there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace batchd::oip {

// Splits `data` into exactly `expected` elements, appended to `out` as views into `data`. On any
// framing fault (a length prefix or element running past the end, more or fewer elements than
// expected, bytes left over) returns what is wrong, for a person, and leaves `out` as it was.
std::optional<std::string> decode_bytes_elements(std::string_view data, std::size_t expected,
                                                 std::vector<std::string_view>& out);

// Appends one element in the framing. Precondition: element.size() < 2^32.
void append_bytes_element(std::string& out, std::string_view element);

// The size of `elements` in the framing.
std::size_t framed_size(std::size_t elements, std::size_t total_bytes) noexcept;

}  // namespace batchd::oip

// The reference batchstring: each input maps to the lowercase hex SHA-256 of its bytes, iterated
// `cost` times (round i hashes the hex text of round i-1), so anyone can check an answer with
// sha256sum. The cpu backend and the tests use this; the CUDA kernel must match it bit for bit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace batchd {

inline constexpr std::size_t kDigestHexBytes = 64;

// Writes exactly kDigestHexBytes characters to out. Precondition: cost >= 1.
void reference_batchstring(std::string_view input, unsigned cost, char* out) noexcept;

std::string reference_batchstring(std::string_view input, unsigned cost);

}  // namespace batchd

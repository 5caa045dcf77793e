#include "backend/reference_batchstring.hpp"

#include <openssl/sha.h>

namespace batchd {
namespace {

void to_hex(const unsigned char* digest, char* out) noexcept {
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xF];
  }
}

}  // namespace

void reference_batchstring(std::string_view input, unsigned cost, char* out) noexcept {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  // SHA256() is OpenSSL 3's one-shot API (not deprecated) and uses the SHA extensions here.
  SHA256(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  to_hex(digest, out);
  for (unsigned round = 1; round < cost; ++round) {
    SHA256(reinterpret_cast<const unsigned char*>(out), kDigestHexBytes, digest);
    to_hex(digest, out);
  }
}

std::string reference_batchstring(std::string_view input, unsigned cost) {
  std::string out(kDigestHexBytes, '\0');
  reference_batchstring(input, cost, out.data());
  return out;
}

}  // namespace batchd

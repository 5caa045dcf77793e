#include "backend/reference_batchstring.hpp"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <memory>

namespace batchd {
namespace {

// OpenSSL 3's one-shot SHA256() looks the algorithm up and allocates a context on every call,
// which costs several times the hash of a short input; fetched once, with a context per thread,
// a hash allocates nothing and takes no lock.
const EVP_MD* sha256_md() noexcept {
  static const std::unique_ptr<EVP_MD, decltype(&EVP_MD_free)> md(EVP_MD_fetch(nullptr, "SHA256", nullptr),
                                                                   &EVP_MD_free);
  return md.get();
}

void sha256(const void* data, std::size_t bytes, unsigned char* digest) noexcept {
  thread_local const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                                 &EVP_MD_CTX_free);
  const EVP_MD* md = sha256_md();
  if (ctx == nullptr || md == nullptr || EVP_DigestInit_ex2(ctx.get(), md, nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), data, bytes) != 1 || EVP_DigestFinal_ex(ctx.get(), digest, nullptr) != 1) {
    SHA256(static_cast<const unsigned char*>(data), bytes, digest);  // out of memory: the slow way
  }
}

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
  sha256(input.data(), input.size(), digest);
  to_hex(digest, out);
  for (unsigned round = 1; round < cost; ++round) {
    sha256(out, kDigestHexBytes, digest);
    to_hex(digest, out);
  }
}

std::string reference_batchstring(std::string_view input, unsigned cost) {
  std::string out(kDigestHexBytes, '\0');
  reference_batchstring(input, cost, out.data());
  return out;
}

}  // namespace batchd

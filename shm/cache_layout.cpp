#include "shm/cache_layout.hpp"

#include <fmt/format.h>

#include <bit>

// Inlined: a hit's hash is most of its cost, and a call into the shared library would be more.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace batchd::shm {

static_assert(kCacheSecretBytes >= XXH3_SECRET_SIZE_MIN);

Expected<CacheGeometry> cache_geometry(std::uint64_t total_bytes) {
  if (total_bytes < kCacheMinBytes) {
    return make_failure(std::errc::invalid_argument,
                        fmt::format("a cache of {} bytes is below the least, {} bytes", total_bytes, kCacheMinBytes));
  }
  CacheGeometry g;
  g.total_bytes = total_bytes;
  g.buckets_offset = kCacheModelTableOffset + sizeof(CacheModelTable);
  g.bucket_count = std::bit_floor(total_bytes / 8 / sizeof(CacheBucket));
  g.log_offset = g.buckets_offset + g.bucket_count * sizeof(CacheBucket);
  g.log_bytes = (total_bytes - g.log_offset) & ~std::uint64_t{7};
  return g;
}

Expected<CacheGeometry> validate_cache_header(const CacheHeader& header, std::uint64_t mapped_bytes) {
  const auto refused = [](std::string why) { return make_failure(std::errc::protocol_error, std::move(why)); };
  if (header.magic != kCacheMagic) return refused("not a batchd cache segment (bad magic)");
  if (header.layout_version != kCacheLayoutVersion) {
    return refused(fmt::format("cache layout version {} (this build reads {})", header.layout_version,
                               kCacheLayoutVersion));
  }
  if (header.total_bytes != mapped_bytes) {
    return refused(fmt::format("cache header says {} bytes, the segment has {}", header.total_bytes, mapped_bytes));
  }
  const Expected<CacheGeometry> expected = cache_geometry(header.total_bytes);
  if (!expected) return refused(expected.error().message);
  const CacheGeometry& g = *expected;
  if (header.bucket_count != g.bucket_count || header.buckets_offset != g.buckets_offset ||
      header.log_offset != g.log_offset || header.log_bytes != g.log_bytes) {
    return refused("cache header's geometry is not the one its size gives");
  }
  if (header.hash != static_cast<std::uint32_t>(CacheHash::kKeyed) &&
      header.hash != static_cast<std::uint32_t>(CacheHash::kOneValue)) {
    return refused(fmt::format("cache hash kind {} is unknown", header.hash));
  }
  return g;
}

std::uint64_t cache_hash(const CacheHeader& header, const CacheKey& key, std::string_view input) noexcept {
  if (header.hash == static_cast<std::uint32_t>(CacheHash::kOneValue)) return 0x5555'5555'5555'5555ULL;
  const std::uint64_t h = XXH3_64bits_withSecret(input.data(), input.size(), header.secret, sizeof(header.secret));
  // The rest of the key only spreads keys: a record's own fields decide a hit.
  return h ^ (((std::uint64_t{key.model} << 32) | key.epoch) * 0x9E37'79B9'7F4A'7C15ULL) ^
         (std::uint64_t{key.scope} * 0xC2B2'AE3D'27D4'EB4FULL);
}

}  // namespace batchd::shm

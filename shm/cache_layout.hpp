// The response cache's shared memory (docs/CACHE.md): a bucket index over a log of records
// (model, epoch, input, answer). Only the daemon writes it; clients map it read-only and answer a
// repeated request in their own process. Nothing here is a lock: a record is published by a
// release store of its log position into one of its bucket's ways, and the log is reused in FIFO
// order behind a `reclaimed` mark that the writer raises before it overwrites anything, so a
// reader that copied a record checks afterwards, as with a seqlock, that the mark had not passed it.
// The hash only picks a bucket and a tag; a hit compares the whole input.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "base/expected.hpp"
#include "shm/layout.hpp"

namespace batchd::shm {

inline constexpr std::uint64_t kCacheMagic = 0x3148434143444221ULL;  // "!BDCACH1"
// Bump on any incompatible change to the structs below; a mismatch is refused (no cache, no error).
inline constexpr std::uint32_t kCacheLayoutVersion = 2;
inline constexpr std::uint32_t kCacheWays = 5;       // what fills a bucket's cache line
inline constexpr std::uint32_t kCacheModels = 64;    // model ids 0..63 (shm::kStatusModels)
inline constexpr std::size_t kCacheSecretBytes = 192;  // XXH3's default secret size
inline constexpr std::uint64_t kCacheMinBytes = 64 * 1024;

// How a segment's keys are hashed. kOneValue sends every key to one bucket with one tag: a test's
// hook (batchd --cache-test-one-bucket) to show that only the whole input decides a hit.
enum class CacheHash : std::uint32_t { kKeyed = 0, kOneValue = 1 };

struct alignas(kCacheLine) CacheHeader {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t hash;  // CacheHash
  std::uint64_t total_bytes;
  std::uint64_t bucket_count;  // a power of two
  std::uint64_t buckets_offset;
  std::uint64_t log_offset;
  std::uint64_t log_bytes;  // a multiple of 8
  std::uint64_t reserved;
  // The per-segment key of the bucket hash: callers that cannot read it (HTTP and gRPC callers)
  // cannot aim their inputs at one bucket.
  unsigned char secret[kCacheSecretBytes];
};

// The log's reuse mark: bytes at log positions below it may be overwritten at any moment.
struct alignas(kCacheLine) CacheLogState {
  std::atomic<std::uint64_t> reclaimed;
};

// By model id: the epoch its records carry in this segment, new on each load; 0 while the model
// is not cached here (then a client does not even hash its input).
struct alignas(kCacheLine) CacheModelTable {
  std::atomic<std::uint32_t> epoch[kCacheModels];
};

// One cache line: each way's tag (0: empty) and its record's log position (0: none). A tag is a
// hint that spares a reader the log; the position, stored last with release, is the publication.
struct alignas(kCacheLine) CacheBucket {
  std::atomic<std::uint32_t> tag[kCacheWays];
  std::uint32_t reserved;
  std::atomic<std::uint64_t> position[kCacheWays];
};

// A record in the log, 8-byte aligned, followed by the input, the answer and padding to 8. It
// never wraps: one that would not fit before the log's end starts at the beginning instead.
struct CacheRecordHeader {
  std::uint64_t hash;
  std::uint32_t model;
  std::uint32_t epoch;
  std::uint32_t scope;  // the caller's trust domain within its client (RequestSlotHeader::cache_scope)
  std::uint32_t key_bytes;
  std::uint32_t value_bytes;
  std::uint32_t reserved;
};

static_assert(std::is_standard_layout_v<CacheHeader> && sizeof(CacheHeader) == 256);
static_assert(kCacheModels == kCacheHitModels, "a client counts its hits for every model it can hit");
static_assert(std::is_standard_layout_v<CacheLogState> && sizeof(CacheLogState) == kCacheLine);
static_assert(sizeof(CacheModelTable) == 4 * kCacheModels, "one word per model, no padding");
static_assert(std::is_standard_layout_v<CacheBucket> && sizeof(CacheBucket) == kCacheLine,
              "a bucket is one cache line: a lookup touches one line before the log");
static_assert(offsetof(CacheBucket, position) == 24);
static_assert(sizeof(CacheRecordHeader) == 32 && sizeof(CacheRecordHeader) % 8 == 0);

inline constexpr std::uint64_t kCacheLogStateOffset = sizeof(CacheHeader);
inline constexpr std::uint64_t kCacheModelTableOffset = kCacheLogStateOffset + sizeof(CacheLogState);

// The derived layout of a segment of `total_bytes`.
struct CacheGeometry {
  std::uint64_t total_bytes = 0;
  std::uint64_t bucket_count = 0;
  std::uint64_t buckets_offset = 0;
  std::uint64_t log_offset = 0;
  std::uint64_t log_bytes = 0;
};

// An eighth of the segment is buckets (5 ways of 12 bytes for each ~150-byte record at that
// ratio, so most buckets keep a free way), the rest the log. EINVAL below kCacheMinBytes.
Expected<CacheGeometry> cache_geometry(std::uint64_t total_bytes);
// Checks a header read from a mapping of `mapped_bytes`: its geometry, or EPROTO and why not.
Expected<CacheGeometry> validate_cache_header(const CacheHeader& header, std::uint64_t mapped_bytes);

// What a record answers for besides its input: the model, its epoch, and the caller's scope.
struct CacheKey {
  std::uint32_t model = 0;
  std::uint32_t epoch = 0;
  std::uint32_t scope = 0;
};
// The key's hash: XXH3 under the segment's secret over the input, mixed with the rest of the key.
[[nodiscard]] std::uint64_t cache_hash(const CacheHeader& header, const CacheKey& key, std::string_view input) noexcept;
[[nodiscard]] inline std::uint32_t cache_tag(std::uint64_t hash) noexcept {
  return static_cast<std::uint32_t>(hash >> 32) | 1U;  // never 0, which marks an empty way
}
[[nodiscard]] constexpr std::uint64_t cache_record_bytes(std::uint64_t key_bytes, std::uint64_t value_bytes) noexcept {
  return (sizeof(CacheRecordHeader) + key_bytes + value_bytes + 7) & ~std::uint64_t{7};
}

}  // namespace batchd::shm

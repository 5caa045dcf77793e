// A process's read-only handle on a response-cache segment (shm/cache_layout.hpp): looks an
// input up without a lock and without writing a byte of shared memory. Clients hold one per
// segment the daemon handed them; the daemon holds one over each segment it writes, to answer a
// request that missed in its client only because the answer landed a moment later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "shm/cache_layout.hpp"

namespace batchd::shm {

class CacheReader {
 public:
  CacheReader() = default;
  // Borrows a mapping of `mapped_bytes` at `base` (it must outlive the reader) after checking its
  // header, which it copies: the daemon never changes it once the segment is handed over.
  static Expected<CacheReader> open(const void* base, std::uint64_t mapped_bytes);

  [[nodiscard]] bool valid() const noexcept { return base_ != nullptr; }
  // The epoch `model`'s records carry here; 0 when this segment does not cache it. Any thread.
  [[nodiscard]] std::uint32_t epoch(std::uint32_t model) const noexcept {
    if (base_ == nullptr || model >= kCacheModels) return 0;
    return models()->epoch[model].load(std::memory_order_acquire);
  }
  // Copies the answer cached for `input` under `key` into `out` and returns true; false on a
  // miss, or when the record was being reused as it was read (out then holds garbage). Any
  // thread; allocates only to grow `out`.
  [[nodiscard]] bool lookup(const CacheKey& key, std::string_view input, std::string& out) const {
    return lookup(key, cache_hash(header_, key, input), input, out);
  }
  // The same with the key's hash already worked out (cache_hash).
  [[nodiscard]] bool lookup(const CacheKey& key, std::uint64_t hash, std::string_view input, std::string& out) const;
  // The same for the model's current epoch (a miss when it is not cached here).
  [[nodiscard]] bool lookup(std::uint32_t model, std::uint32_t scope, std::string_view input,
                            std::string& out) const {
    const std::uint32_t e = epoch(model);
    return e != 0 && lookup(CacheKey{model, e, scope}, input, out);
  }

  [[nodiscard]] const CacheHeader& header() const noexcept { return header_; }
  [[nodiscard]] const CacheGeometry& geometry() const noexcept { return g_; }

 private:
  [[nodiscard]] const CacheModelTable* models() const noexcept {
    return reinterpret_cast<const CacheModelTable*>(base_ + kCacheModelTableOffset);
  }
  [[nodiscard]] const CacheLogState* log_state() const noexcept {
    return reinterpret_cast<const CacheLogState*>(base_ + kCacheLogStateOffset);
  }
  [[nodiscard]] const CacheBucket& bucket(std::uint64_t hash) const noexcept {
    return reinterpret_cast<const CacheBucket*>(base_ + g_.buckets_offset)[hash & (g_.bucket_count - 1)];
  }
  // Whether the record at `position` is the one for this key, read with the rules of a racing
  // writer: every length checked against the log before it is used.
  [[nodiscard]] bool record_matches(std::uint64_t position, std::uint64_t hash, const CacheKey& key,
                                    std::string_view input, std::uint32_t& value_bytes) const noexcept;

  const std::byte* base_ = nullptr;
  CacheHeader header_{};
  CacheGeometry g_{};
};

// Word-wise relaxed atomic access to the log, the only way either side touches record bytes:
// the writer's stores and a reader's racing loads are then atomic, as a seqlock's must be (and
// ThreadSanitizer can see that they are). Offsets and sizes are multiples of 8.
void cache_store_words(std::byte* to, const void* from, std::uint64_t bytes) noexcept;
void cache_load_words(void* to, const std::byte* from, std::uint64_t bytes) noexcept;
[[nodiscard]] std::uint64_t cache_load_word(const std::byte* from) noexcept;

}  // namespace batchd::shm

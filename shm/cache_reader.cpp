#include "shm/cache_reader.hpp"

#include <cstring>

#include "shm/untrusted.hpp"

namespace batchd::shm {

void cache_store_words(std::byte* to, const void* from, std::uint64_t bytes) noexcept {
  const auto* src = static_cast<const std::byte*>(from);
  for (std::uint64_t i = 0; i < bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, src + i, 8);
    store_once(*reinterpret_cast<std::uint64_t*>(to + i), word);
  }
}

std::uint64_t cache_load_word(const std::byte* from) noexcept {
  return load_once(*reinterpret_cast<const std::uint64_t*>(from));
}

void cache_load_words(void* to, const std::byte* from, std::uint64_t bytes) noexcept {
  auto* dst = static_cast<std::byte*>(to);
  std::uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t word = cache_load_word(from + i);
    std::memcpy(dst + i, &word, 8);
  }
  if (i < bytes) {  // the tail: the record's padding makes the whole word readable
    const std::uint64_t word = cache_load_word(from + i);
    std::memcpy(dst + i, &word, bytes - i);
  }
}

Expected<CacheReader> CacheReader::open(const void* base, std::uint64_t mapped_bytes) {
  CacheReader reader;
  if (mapped_bytes < sizeof(CacheHeader)) {
    return make_failure(std::errc::protocol_error, "cache segment smaller than its header");
  }
  std::memcpy(&reader.header_, base, sizeof(CacheHeader));
  Expected<CacheGeometry> g = validate_cache_header(reader.header_, mapped_bytes);
  if (!g) return g.error();
  reader.g_ = *g;
  reader.base_ = static_cast<const std::byte*>(base);
  return reader;
}

namespace {

// Whether the `bytes` at `at` (8-aligned, readable in whole words) equal `want`, word by word.
bool equal_words(const std::byte* at, std::string_view want) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= want.size(); i += 8) {
    std::uint64_t a;
    std::memcpy(&a, want.data() + i, 8);
    if (cache_load_word(at + i) != a) return false;
  }
  if (i == want.size()) return true;
  std::uint64_t a = 0;
  std::uint64_t b = cache_load_word(at + i);
  std::memcpy(&a, want.data() + i, want.size() - i);
  std::uint64_t b_tail = 0;
  std::memcpy(&b_tail, &b, want.size() - i);
  return a == b_tail;
}

}  // namespace

bool CacheReader::record_matches(std::uint64_t position, std::uint64_t hash, const CacheKey& key,
                                 std::string_view input, std::uint32_t& value_bytes) const noexcept {
  const std::uint64_t offset = position % g_.log_bytes;
  if ((offset & 7) != 0 || offset + sizeof(CacheRecordHeader) > g_.log_bytes) return false;
  const std::byte* record = base_ + g_.log_offset + offset;
  CacheRecordHeader h;
  cache_load_words(&h, record, sizeof(h));
  if (h.hash != hash || h.model != key.model || h.epoch != key.epoch || h.scope != key.scope ||
      h.key_bytes != input.size()) {
    return false;
  }
  if (offset + cache_record_bytes(h.key_bytes, h.value_bytes) > g_.log_bytes) return false;
  if (!equal_words(record + sizeof(CacheRecordHeader), input)) return false;
  value_bytes = h.value_bytes;
  return true;
}

bool CacheReader::lookup(const CacheKey& key, std::uint64_t hash, std::string_view input, std::string& out) const {
  if (base_ == nullptr || key.epoch == 0) return false;
  const std::uint32_t tag = cache_tag(hash);
  const CacheBucket& b = bucket(hash);
  for (std::uint32_t way = 0; way < kCacheWays; ++way) {
    if (b.tag[way].load(std::memory_order_relaxed) != tag) continue;
    const std::uint64_t position = b.position[way].load(std::memory_order_acquire);
    std::uint32_t value_bytes = 0;
    if (position == 0 || !record_matches(position, hash, key, input, value_bytes)) continue;
    const std::uint64_t value_offset = position % g_.log_bytes + sizeof(CacheRecordHeader) + input.size();
    out.resize(value_bytes);
    // The value may start mid-word: copy whole words from the word it starts in.
    const std::uint64_t skew = value_offset & 7;
    const std::byte* from = base_ + g_.log_offset + (value_offset - skew);
    if (skew == 0) {
      cache_load_words(out.data(), from, value_bytes);
    } else {
      std::uint64_t word = cache_load_word(from);
      const std::size_t head = std::min<std::size_t>(8 - skew, value_bytes);
      std::memcpy(out.data(), reinterpret_cast<const char*>(&word) + skew, head);
      if (value_bytes > head) cache_load_words(out.data() + head, from + 8, value_bytes - head);
    }
    // Every read above came before this mark's: a writer that began reusing the record's bytes
    // had raised it first.
    std::atomic_thread_fence(std::memory_order_acquire);
    return log_state()->reclaimed.load(std::memory_order_relaxed) <= position;
  }
  return false;
}

}  // namespace batchd::shm

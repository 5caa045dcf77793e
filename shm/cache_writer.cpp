#include "shm/cache_writer.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shm/memfd_region.hpp"

namespace batchd::shm {
namespace {

Expected<void> fill_random(unsigned char* bytes, std::size_t n) {
  for (std::size_t got = 0; got < n;) {
    const ssize_t r = ::getrandom(bytes + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_failure("getrandom");
    got += static_cast<std::size_t>(r);
  }
  return {};
}

}  // namespace

Expected<std::unique_ptr<CacheWriter>> CacheWriter::create(const char* name, std::uint64_t total_bytes,
                                                           CacheHash hash) {
  Expected<CacheGeometry> g = cache_geometry(total_bytes);
  if (!g) return g.error();
  std::unique_ptr<CacheWriter> w(new CacheWriter());
  w->g_ = *g;
  Expected<UniqueFd> fd = create_memfd(name, total_bytes);
  if (!fd) return fd.error();
  w->fd_ = std::move(*fd);
  Expected<boost::interprocess::mapped_region> map = map_fd(w->fd_.get(), total_bytes, true);
  if (!map) return map.error();
  w->map_ = std::move(*map);
  w->base_ = static_cast<std::byte*>(w->map_.get_address());
  // Our mapping stays writable; every mapping made from here on, by anyone, is read-only.
  if (auto sealed = seal_memfd(w->fd_.get(), true); !sealed) return sealed.error();

  CacheHeader header{};
  header.magic = kCacheMagic;
  header.layout_version = kCacheLayoutVersion;
  header.hash = static_cast<std::uint32_t>(hash);
  header.total_bytes = w->g_.total_bytes;
  header.bucket_count = w->g_.bucket_count;
  header.buckets_offset = w->g_.buckets_offset;
  header.log_offset = w->g_.log_offset;
  header.log_bytes = w->g_.log_bytes;
  if (auto random = fill_random(header.secret, sizeof(header.secret)); !random) return random.error();
  std::memcpy(w->base_, &header, sizeof(header));  // before any client can map it
  Expected<CacheReader> reader = CacheReader::open(w->base_, total_bytes);
  if (!reader) return reader.error();
  w->reader_ = *reader;
  w->head_ = w->g_.log_bytes;
  return w;
}

void CacheWriter::set_epoch(std::uint32_t model, std::uint32_t epoch) {
  if (model >= kCacheModels) return;
  std::lock_guard lock(mu_);
  const std::uint32_t before = models().epoch[model].exchange(epoch, std::memory_order_acq_rel);
  if (before == 0 || before == epoch) return;
  // Its records can no longer match (their epoch is gone); unpublished now, they stop counting.
  for (const Live& live : live_) {
    if (live.model == model) (void)unpublish(live);
  }
}

bool CacheWriter::unpublish(const Live& live) {
  CacheBucket& b = bucket_at(live.bucket);
  if (b.position[live.way].load(std::memory_order_relaxed) != live.position) return false;
  b.position[live.way].store(0, std::memory_order_relaxed);
  b.tag[live.way].store(0, std::memory_order_relaxed);
  counts_.entries -= 1;
  counts_.bytes -= live.bytes;
  return true;
}

void CacheWriter::reclaim_to(std::uint64_t position) {
  while (!live_.empty() && live_.front().position < position) {
    if (unpublish(live_.front())) counts_.evictions += 1;
    live_.pop_front();
  }
  log_state().reclaimed.store(position, std::memory_order_relaxed);
  // The mark is visible before any byte below it changes (the seqlock's odd count).
  std::atomic_thread_fence(std::memory_order_release);
}

std::uint32_t CacheWriter::pick_way(const CacheBucket& b) const noexcept {
  const std::uint64_t reclaimed = log_state().reclaimed.load(std::memory_order_relaxed);
  std::uint32_t oldest = 0;
  for (std::uint32_t way = 0; way < kCacheWays; ++way) {
    const std::uint64_t position = b.position[way].load(std::memory_order_relaxed);
    if (position == 0 || position < reclaimed) return way;  // empty, or its bytes are being reused
    if (position < b.position[oldest].load(std::memory_order_relaxed)) oldest = way;
  }
  return oldest;
}

bool CacheWriter::insert(std::uint32_t model, std::uint32_t scope, std::string_view input, std::string_view answer) {
  if (model >= kCacheModels) return false;
  const CacheKey key{model, models().epoch[model].load(std::memory_order_relaxed), scope};
  return key.epoch != 0 && insert(key, cache_hash(reader_.header(), key, input), input, answer);
}

bool CacheWriter::insert(const CacheKey& key, std::uint64_t hash, std::string_view input, std::string_view answer) {
  const std::uint32_t model = key.model;
  if (model >= kCacheModels || key.epoch == 0) return false;
  const std::uint64_t record_bytes = cache_record_bytes(input.size(), answer.size());
  if (record_bytes > g_.log_bytes / 8 || input.size() > UINT32_MAX || answer.size() > UINT32_MAX) return false;
  std::lock_guard lock(mu_);
  if (models().epoch[model].load(std::memory_order_relaxed) != key.epoch) return false;
  const std::uint64_t index = hash & (g_.bucket_count - 1);
  CacheBucket& b = bucket_at(index);
  if (reader_.lookup(key, hash, input, seen_)) return true;  // stored already: keep one record a key

  const std::uint64_t offset = head_ % g_.log_bytes;
  if (g_.log_bytes - offset < record_bytes) head_ += g_.log_bytes - offset;  // no record wraps
  const std::uint64_t position = head_;
  if (position + record_bytes > log_state().reclaimed.load(std::memory_order_relaxed) + g_.log_bytes) {
    reclaim_to(position + record_bytes - g_.log_bytes);
  }
  scratch_.resize(record_bytes);
  const CacheRecordHeader h{hash, model, key.epoch, key.scope, static_cast<std::uint32_t>(input.size()),
                            static_cast<std::uint32_t>(answer.size()), 0};
  std::memcpy(scratch_.data(), &h, sizeof(h));
  std::memcpy(scratch_.data() + sizeof(h), input.data(), input.size());
  std::memcpy(scratch_.data() + sizeof(h) + input.size(), answer.data(), answer.size());
  std::memset(scratch_.data() + sizeof(h) + input.size() + answer.size(), 0,
              record_bytes - sizeof(h) - input.size() - answer.size());
  cache_store_words(base_ + g_.log_offset + position % g_.log_bytes, scratch_.data(), record_bytes);

  const std::uint32_t way = pick_way(b);
  const std::uint64_t displaced = b.position[way].load(std::memory_order_relaxed);
  if (displaced >= log_state().reclaimed.load(std::memory_order_relaxed) && displaced != 0) {
    // A live record loses its place; its Live entry then no longer matches its way.
    const auto live = std::lower_bound(live_.begin(), live_.end(), displaced,
                                       [](const Live& l, std::uint64_t p) { return l.position < p; });
    if (live != live_.end() && live->position == displaced && unpublish(*live)) counts_.evictions += 1;
  }
  b.tag[way].store(cache_tag(hash), std::memory_order_relaxed);
  b.position[way].store(position, std::memory_order_release);  // publishes the record above
  live_.push_back(Live{position, index, way, model, record_bytes});
  head_ = position + record_bytes;
  counts_.entries += 1;
  counts_.bytes += record_bytes;
  counts_.inserts += 1;
  return true;
}

CacheCounts CacheWriter::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace batchd::shm

// The daemon's handle on one response-cache segment (shm/cache_layout.hpp): creates it as a
// sealed memfd that receivers can map only read-only, stores answers, keeps the FIFO order in
// which the log is reused, and drops a model's records. Clients cannot write the segment at
// all, so nothing here reads what a client wrote.
#pragma once

#include <boost/interprocess/mapped_region.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "shm/cache_layout.hpp"
#include "shm/cache_reader.hpp"
#include "shm/fd.hpp"

namespace batchd::shm {

// What a segment holds and has done, for metrics.
struct CacheCounts {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;      // of the log its live records take
  std::uint64_t inserts = 0;
  std::uint64_t evictions = 0;  // records overwritten or displaced while their model was cached
};

class CacheWriter {
 public:
  // A segment of `total_bytes` with a fresh random secret (getrandom); `hash` kOneValue is the
  // tests' hook. ENOMEM, EMFILE... as values.
  static Expected<std::unique_ptr<CacheWriter>> create(const char* name, std::uint64_t total_bytes,
                                                        CacheHash hash = CacheHash::kKeyed);
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  // The memfd to hand to clients: sealed, so they can map it read-only only.
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return g_.total_bytes; }
  // Lookups in this segment, as a client's (the daemon's own second chance). Any thread.
  [[nodiscard]] const CacheReader& reader() const noexcept { return reader_; }

  // Starts caching `model` under `epoch` (new on each load: a record of an older one never
  // matches), or stops (0), dropping its records. Any thread.
  void set_epoch(std::uint32_t model, std::uint32_t epoch);
  // Stores the answer to `input` for `model` and the caller's `scope` under the model's current
  // epoch; false when not stored (the model is not cached here, or the record would take more
  // than an eighth of the log). An input already stored is left as it is. Any thread (one at a
  // time inside).
  bool insert(std::uint32_t model, std::uint32_t scope, std::string_view input, std::string_view answer);
  // The same for a key whose hash was worked out already (cache_hash), under key.epoch: false, not
  // stored, when the model's epoch is no longer that one (its answer is an earlier load's).
  bool insert(const CacheKey& key, std::uint64_t hash, std::string_view input, std::string_view answer);
  [[nodiscard]] CacheCounts counts() const;

 private:
  // A live record, in log order: what reusing its bytes must unpublish first.
  struct Live {
    std::uint64_t position;
    std::uint64_t bucket;
    std::uint32_t way;
    std::uint32_t model;
    std::uint64_t bytes;
  };

  CacheWriter() = default;
  [[nodiscard]] CacheBucket& bucket_at(std::uint64_t index) const noexcept {
    return reinterpret_cast<CacheBucket*>(base_ + g_.buckets_offset)[index];
  }
  [[nodiscard]] CacheModelTable& models() const noexcept {
    return *reinterpret_cast<CacheModelTable*>(base_ + kCacheModelTableOffset);
  }
  [[nodiscard]] CacheLogState& log_state() const noexcept {
    return *reinterpret_cast<CacheLogState*>(base_ + kCacheLogStateOffset);
  }
  // Unpublishes every record below `position` and raises the reuse mark to it. Holds mu_.
  void reclaim_to(std::uint64_t position);
  // Empties the way that still holds `live` (a record's one place) and stops counting the record;
  // whether it did. Holds mu_.
  bool unpublish(const Live& live);
  // The way a new record for `hash` takes: a free one, else the oldest. Holds mu_.
  std::uint32_t pick_way(const CacheBucket& b) const noexcept;

  UniqueFd fd_;
  boost::interprocess::mapped_region map_;
  std::byte* base_ = nullptr;
  CacheGeometry g_;
  CacheReader reader_;

  mutable std::mutex mu_;
  std::uint64_t head_ = 0;  // the next record's log position (starts at one lap: 0 means "none")
  std::deque<Live> live_;   // oldest first
  std::vector<std::byte> scratch_;  // a record assembled before it is stored word by word
  std::string seen_;                // insert's look for the key first
  CacheCounts counts_;
};

}  // namespace batchd::shm

// The daemon's response caches (docs/CACHE.md): one segment per trust domain (each user with
// clients attached, up to DaemonConfig::cache_users of them, and one that every user shares for
// models declared `cache_scope = "all"`), and which model is cached in which, under which epoch.
// A client is handed its user's segment and the shared one at attach; only the daemon writes them.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "daemon/config.hpp"
#include "shm/cache_writer.hpp"

namespace batchd {

class ClientSession;

class ResponseCaches {
 public:
  // Makes the shared segment and the empty one (start-up: throws what stops it).
  explicit ResponseCaches(const DaemonConfig& config);
  ResponseCaches(const ResponseCaches&) = delete;
  ResponseCaches& operator=(const ResponseCaches&) = delete;

  // The segment a new client of `uid` reads: its user's, made now if there is room (a user whose
  // clients have all gone makes way); else the empty one, where nothing is ever cached. Drain thread.
  [[nodiscard]] std::shared_ptr<shm::CacheWriter> for_user(uid_t uid);
  // The last client of `uid` has gone: its segment goes once nothing holds it any more (its
  // entries with it). Drain thread.
  void release_user(uid_t uid);
  // The segment every client is handed beside its user's. Any thread.
  [[nodiscard]] const shm::CacheWriter& shared() const noexcept { return *shared_; }

  // A model's cache starts with a new epoch (its load; settings.cache off: it stops), or stops
  // (its unload: its records go). Drain thread.
  void start_model(std::uint32_t model, const ModelSettings& settings);
  void stop_model(std::uint32_t model);
  // Where `session`'s answers for `model` are kept: nullptr when the model is not cached. Any thread.
  [[nodiscard]] shm::CacheWriter* segment_for(const ClientSession& session, std::uint32_t model) const noexcept;

  // Whether `model`'s answers are cached now. Any thread.
  [[nodiscard]] bool cached(std::uint32_t model) const noexcept {
    return model < shm::kCacheModels && scope_[model].load(std::memory_order_relaxed) != Scope::kOff;
  }
  // Whether any model's answers are cached now. Drain thread (each time its loop goes to sleep).
  [[nodiscard]] bool any_cached() const noexcept { return cached_models_ != 0; }
  // Every segment's counts, summed. Any thread.
  [[nodiscard]] shm::CacheCounts counts() const;
  // The memory one segment takes at most (0: no cache).
  [[nodiscard]] std::uint64_t segment_bytes() const noexcept { return segment_bytes_; }

 private:
  enum class Scope : std::uint8_t { kOff = 0, kUser = 1, kAll = 2 };
  [[nodiscard]] std::unique_ptr<shm::CacheWriter> make_segment(const char* name, std::uint64_t bytes) const;

  const DaemonConfig& config_;
  std::uint64_t segment_bytes_ = 0;
  std::unique_ptr<shm::CacheWriter> shared_;
  std::shared_ptr<shm::CacheWriter> empty_;  // for a user past cache_users, or with no cache at all
  std::array<std::atomic<Scope>, shm::kCacheModels> scope_{};
  std::array<std::uint32_t, shm::kCacheModels> epoch_{};  // drain thread's
  std::uint32_t next_epoch_ = 1;                           // drain thread's
  unsigned cached_models_ = 0;                             // drain thread's: scope_ not kOff

  mutable std::mutex mu_;  // users_ and released_ (the drain thread changes them; counts() reads them)
  std::map<uid_t, std::shared_ptr<shm::CacheWriter>> users_;
  shm::CacheCounts released_;  // the stores and evictions of segments released, so the totals only grow
  bool warned_full_ = false;   // drain thread's: a user past cache_users was logged
};

}  // namespace batchd

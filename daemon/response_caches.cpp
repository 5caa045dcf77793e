#include "daemon/response_caches.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "daemon/client_session.hpp"
#include "shm/align.hpp"

namespace batchd {

ResponseCaches::ResponseCaches(const DaemonConfig& config) : config_(config) {
  // An even share each, whole pages; too small a share is no cache.
  const std::uint64_t share = shm::round_down_to_page(config.cache_bytes / (std::uint64_t{config.cache_users} + 1));
  if (share >= shm::kCacheMinBytes) {
    segment_bytes_ = share;
  } else if (config.cache_bytes != 0) {
    spdlog::warn("--cache-mib {:.2f} split {} ways is less than a cache's least ({} KiB each): no response cache",
                 static_cast<double>(config.cache_bytes) / (1 << 20), config.cache_users + 1,
                 shm::kCacheMinBytes / 1024);
  }
  empty_ = make_segment("batchd-cache-none", shm::kCacheMinBytes);
  shared_ = segment_bytes_ != 0 ? make_segment("batchd-cache-all", segment_bytes_)
                                : make_segment("batchd-cache-all", shm::kCacheMinBytes);
}

std::unique_ptr<shm::CacheWriter> ResponseCaches::make_segment(const char* name, std::uint64_t bytes) const {
  auto made = shm::CacheWriter::create(
      name, bytes, config_.cache_test_one_bucket ? shm::CacheHash::kOneValue : shm::CacheHash::kKeyed);
  if (!made) throw std::runtime_error(std::string("cannot create the response cache: ") + made.error().message);
  return std::move(*made);
}

std::shared_ptr<shm::CacheWriter> ResponseCaches::for_user(uid_t uid) {
  if (segment_bytes_ == 0) return empty_;
  std::lock_guard lock(mu_);
  if (auto found = users_.find(uid); found != users_.end()) return found->second;
  if (users_.size() >= config_.cache_users) {
    // Once: a user may attach hundreds of times a second.
    if (!warned_full_) {
      spdlog::warn("uid {} gets no response cache: {} users have one (--cache-users); said once", uid, users_.size());
      warned_full_ = true;
    }
    return empty_;
  }
  std::shared_ptr<shm::CacheWriter> made;
  try {
    made = make_segment("batchd-cache-user", segment_bytes_);
  } catch (const std::exception& e) {
    spdlog::error("uid {} gets no response cache: {}", uid, e.what());
    return empty_;
  }
  for (std::uint32_t m = 0; m < shm::kCacheModels; ++m) {
    if (scope_[m].load(std::memory_order_relaxed) == Scope::kUser) made->set_epoch(m, epoch_[m]);
  }
  users_.emplace(uid, made);
  return made;
}

void ResponseCaches::release_user(uid_t uid) {
  std::lock_guard lock(mu_);
  auto found = users_.find(uid);
  if (found == users_.end()) return;
  const shm::CacheCounts c = found->second->counts();
  released_.inserts += c.inserts;
  released_.evictions += c.evictions;
  users_.erase(found);  // the sessions still answering hold it until they go
}

void ResponseCaches::start_model(std::uint32_t model, const ModelSettings& settings) {
  if (model >= shm::kCacheModels) return;
  stop_model(model);
  if (!settings.cache || segment_bytes_ == 0) return;
  const Scope scope = settings.cache_scope == ModelSettings::CacheScope::kAll ? Scope::kAll : Scope::kUser;
  epoch_[model] = next_epoch_++;
  if (scope == Scope::kAll) {
    shared_->set_epoch(model, epoch_[model]);
  } else {
    std::lock_guard lock(mu_);
    for (auto& [uid, segment] : users_) segment->set_epoch(model, epoch_[model]);
  }
  scope_[model].store(scope, std::memory_order_release);
  ++cached_models_;
}

void ResponseCaches::stop_model(std::uint32_t model) {
  if (model >= shm::kCacheModels) return;
  const Scope was = scope_[model].exchange(Scope::kOff, std::memory_order_acq_rel);
  if (was != Scope::kOff) --cached_models_;
  if (was == Scope::kAll) shared_->set_epoch(model, 0);
  if (was == Scope::kUser) {
    std::lock_guard lock(mu_);
    for (auto& [uid, segment] : users_) segment->set_epoch(model, 0);
  }
  epoch_[model] = 0;
}

shm::CacheWriter* ResponseCaches::segment_for(const ClientSession& session, std::uint32_t model) const noexcept {
  if (model >= shm::kCacheModels) return nullptr;
  switch (scope_[model].load(std::memory_order_acquire)) {
    case Scope::kOff: return nullptr;
    case Scope::kAll: return shared_.get();
    case Scope::kUser: return session.cache();
  }
  return nullptr;
}

shm::CacheCounts ResponseCaches::counts() const {
  shm::CacheCounts sum = shared_->counts();
  std::lock_guard lock(mu_);
  sum.inserts += released_.inserts;
  sum.evictions += released_.evictions;
  for (const auto& [uid, segment] : users_) {
    const shm::CacheCounts c = segment->counts();
    sum.entries += c.entries;
    sum.bytes += c.bytes;
    sum.inserts += c.inserts;
    sum.evictions += c.evictions;
  }
  return sum;
}

}  // namespace batchd

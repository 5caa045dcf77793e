#include "daemon/handshake_limiter.hpp"

#include <algorithm>

namespace batchd {
namespace {

double refill(double tokens, std::int64_t from_ns, std::int64_t now_ns) noexcept {
  const double elapsed_s = static_cast<double>(std::max<std::int64_t>(0, now_ns - from_ns)) / 1e9;
  return std::min(HandshakeLimiter::kPerUidBurst, tokens + elapsed_s * HandshakeLimiter::kPerUidPerSecond);
}

}  // namespace

bool HandshakeLimiter::admit(uid_t uid, std::int64_t now_ns) {
  if (buckets_.size() >= kMaxTrackedUids && !buckets_.contains(uid)) forget_idle(now_ns);
  if (buckets_.size() >= kMaxTrackedUids && !buckets_.contains(uid)) return false;  // every one busy
  Bucket& bucket = buckets_[uid];
  if (bucket.refilled_ns != 0) bucket.tokens = refill(bucket.tokens, bucket.refilled_ns, now_ns);
  bucket.refilled_ns = now_ns;
  if (bucket.tokens < 1) return false;
  bucket.tokens -= 1;
  return true;
}

void HandshakeLimiter::forget_idle(std::int64_t now_ns) {
  std::erase_if(buckets_, [&](const auto& entry) {
    return refill(entry.second.tokens, entry.second.refilled_ns, now_ns) >= kPerUidBurst;
  });
}

uid_t HandshakeLimiter::heaviest(const std::unordered_map<uid_t, unsigned>& open, uid_t newcomer) noexcept {
  uid_t chosen = newcomer;
  unsigned most = 0;
  if (auto it = open.find(newcomer); it != open.end()) most = it->second;
  for (const auto& [uid, count] : open) {
    if (count > most) {
      most = count;
      chosen = uid;
    }
  }
  return chosen;
}

}  // namespace batchd

#include "daemon/log_limiter.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace batchd {

bool LogLimiter::allow(LogKind kind, std::int64_t now_ns, std::string& note) {
  Bucket& b = buckets_[static_cast<std::size_t>(kind)];
  if (b.refilled_ns != 0 && now_ns > b.refilled_ns) {
    b.tokens = std::min(kBurst, b.tokens + static_cast<double>(now_ns - b.refilled_ns) * 1e-9 * kPerSecond);
  }
  b.refilled_ns = std::max(b.refilled_ns, now_ns);
  note.clear();
  if (b.tokens < 1) {
    ++b.suppressed;
    return false;
  }
  b.tokens -= 1;
  if (b.suppressed != 0) {
    note = fmt::format(" ({} more like this suppressed)", b.suppressed);
    b.suppressed = 0;
  }
  return true;
}

}  // namespace batchd

// SIGHUP's part on the daemon: handing a re-read config to the drain loop. The changes themselves
// are ModelChanges' (model_changes.hpp).
#include "daemon/daemon.hpp"

namespace batchd {

void Daemon::reload(const DaemonConfig& fresh) {
  {
    std::lock_guard lock(reload_mu_);
    reload_ = fresh;
  }
  reload_pending_.store(true, std::memory_order_release);
  events_.ring();
}

void Daemon::apply_reload() {
  if (!reload_pending_.exchange(false, std::memory_order_acq_rel)) return;
  std::optional<DaemonConfig> fresh;
  {
    std::lock_guard lock(reload_mu_);
    fresh.swap(reload_);
  }
  if (!fresh || stop_requested_.load(std::memory_order_relaxed)) return;
  changes_.reload(*fresh);
  limits_changed_.store(true, std::memory_order_release);
}

}  // namespace batchd

// Model control's and SIGHUP's part on the daemon: who may load or unload a model, and handing
// a re-read config to the drain loop. The changes themselves are ModelChanges' (model_changes.hpp).
#include <unistd.h>

#include <cstring>

#include "daemon/daemon.hpp"

namespace batchd {

void Daemon::answer_model_control(PendingAttach& pending, const shm::ModelControlHello& hello) {
  const PeerCredentials& peer = pending.peer;
  // An operator's act, like a restart: the daemon's own user (the front-ends' units run as it)
  // or root.
  if (peer.uid != ::geteuid() && peer.uid != 0) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "only the daemon's user (uid " + std::to_string(::geteuid()) + ") or root may load or unload models");
    return;
  }
  if ((hello.action != shm::ModelAction::kLoad && hello.action != shm::ModelAction::kUnload) || hello.reserved != 0 ||
      std::memchr(hello.model, '\0', sizeof(hello.model)) == nullptr) {
    refuse(pending, shm::AttachStatus::kBadHello, "malformed model-control request");
    return;
  }
  const std::string name(hello.model);
  ModelPipeline* model = models_.named(name);
  if (model == nullptr) {
    refuse(pending, shm::AttachStatus::kUnknownModel, "no model named " + name + " is declared here");
    return;
  }
  const auto refusal = changes_.request(*model, hello.action == shm::ModelAction::kLoad, pending.connection, peer);
  if (refusal) refuse(pending, refusal->status, refusal->why);
}

void Daemon::drop_workers_of(ModelPipeline& model) {
  for (const std::uint64_t id : workers_.serving(&model)) drop_worker(id, nullptr);
}

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

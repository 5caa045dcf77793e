// Model control (shm/model_control.hpp: batchctl load/unload, the front-ends' repository routes):
// an unload stops admitting the model's requests at once, answers what it holds, then releases
// its lanes, router and backend; a load makes the backend again on a thread of its own (a GPU's
// start may take seconds) and the drain loop runs it once made. Either leaves every other model
// untouched. The caller's connection is answered once the change is done. A SIGHUP's re-read
// config goes the same ways: a model added is loaded, one dropped is unloaded and removed.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>

#include "daemon/daemon.hpp"

namespace batchd {
namespace {

shm::AttachReply control_reply(shm::AttachStatus status, const std::string& message) {
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = status;
  std::snprintf(reply.message, sizeof(reply.message), "%s", message.c_str());
  return reply;
}

// Non-blocking, as every send to a peer: one that does not read loses only its answer.
void send_reply(int connection, shm::AttachStatus status, const std::string& message) {
  const shm::AttachReply reply = control_reply(status, message);
  (void)shm::send_with_fds(connection, std::as_bytes(std::span(&reply, 1)), {});
}

const char* action_name(shm::ModelAction action) { return action == shm::ModelAction::kLoad ? "load" : "unload"; }

}  // namespace

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
  ModelPipeline* model = model_named(name);
  if (model == nullptr) {
    refuse(pending, shm::AttachStatus::kUnknownModel, "no model named " + name + " is declared here");
    return;
  }
  const auto lifecycle = model->lifecycle();
  using Lifecycle = ModelPipeline::Lifecycle;
  const bool load = hello.action == shm::ModelAction::kLoad;
  if (load ? lifecycle == Lifecycle::kLoaded : lifecycle == Lifecycle::kUnloaded) {
    send_reply(pending.connection.get(), shm::AttachStatus::kOk,
               "model " + name + (load ? " is loaded" : " is unloaded"));
    return;
  }
  if (load ? lifecycle == Lifecycle::kUnloading : lifecycle == Lifecycle::kLoading) {
    refuse(pending, shm::AttachStatus::kModelChanging,
           "model " + name + (load ? " is unloading (answering what it holds); load it once that is done"
                                   : " is loading; unload it once that is done"));
    return;
  }
  std::unique_ptr<ModelChange>& change = changes_[model->id()];
  if (change != nullptr && change->waiting.size() >= kMaxControlWaiting) {
    refuse(pending, shm::AttachStatus::kBusy, "too many callers already wait for model " + name + "'s " +
                                                  action_name(hello.action));
    return;
  }
  if (load && lifecycle == Lifecycle::kUnloaded && !loader_) {
    refuse(pending, shm::AttachStatus::kModelLoadFailed, "this daemon cannot load models (it has no model loader)");
    return;
  }
  if (change == nullptr) {
    if (load) {
      const std::string why = fmt::format("asked by pid {} uid {}", peer.pid, peer.uid);
      start_load(*model, why.c_str());
    } else {
      change = std::make_unique<ModelChange>();
      change->started_ns = shm::monotonic_ns();
      model->begin_unload();
      spdlog::info("model {}: unloading: admitting nothing more, answering the {} requests it holds (asked by "
                   "pid {} uid {})",
                   name, model->waiting(), peer.pid, peer.uid);
    }
  }
  change->waiting.push_back(std::move(pending.connection));
  ring_doorbell();  // the next pass looks at it
}

bool Daemon::start_load(ModelPipeline& model, const char* why) {
  std::unique_ptr<ModelChange>& change = changes_[model.id()];
  if (change != nullptr || !loader_) {
    spdlog::error("model {}: cannot load it now ({})", model.config().name,
                  change != nullptr ? "it is being loaded or unloaded" : "this daemon has no model loader");
    return false;
  }
  change = std::make_unique<ModelChange>();
  change->started_ns = shm::monotonic_ns();
  model.begin_load();
  ModelChange* raw = change.get();
  // A copy: the loader must not read what the drain thread may change meanwhile.
  raw->loader = std::thread([this, raw, config = model.declared()] {
    Expected<std::unique_ptr<Backend>> made = [&]() -> Expected<std::unique_ptr<Backend>> {
      try {
        return loader_(config);
      } catch (const std::exception& e) {
        return make_failure(std::errc::io_error, e.what());
      }
    }();
    raw->result = std::move(made);
    raw->made.store(true, std::memory_order_release);
    ring_doorbell();
  });
  spdlog::info("model {}: loading ({})", model.config().name, why);
  return true;
}

void Daemon::advance_model_changes(std::int64_t now_ns) {
  for (auto& model : models_) {
    ModelChange* change = changes_[model->id()].get();
    if (change == nullptr) continue;
    if (model->lifecycle() == ModelPipeline::Lifecycle::kUnloading) {
      // A batch that waits for a worker waits no more once none is attached to run it.
      if (model->workers() != nullptr && model->workers()->attached() == 0) model->router().abandon_waiting();
      if (model->unloading_done()) finish_unload(*model);
    } else if (change->made.load(std::memory_order_acquire)) {
      finish_load(*model);
    }
  }
  (void)now_ns;
}

void Daemon::finish_unload(ModelPipeline& model) {
  // Its workers go first: their links reference the router's devices.
  for (auto it = attached_workers_.begin(); it != attached_workers_.end();) {
    const std::uint64_t id = it->first;
    const bool its = it->second.model == &model;
    ++it;
    if (its) drop_worker(id, nullptr);
  }
  {
    std::lock_guard lock(models_mu_);
    model.release();
  }
  std::unique_ptr<ModelChange> change = std::move(changes_[model.id()]);
  const double seconds = static_cast<double>(shm::monotonic_ns() - change->started_ns) / 1e9;
  const std::string message = fmt::format("model {} is unloaded ({:.3f} s)", model.config().name, seconds);
  spdlog::info("{}", message);
  if (change->remove_after) {
    model.remove();
  }
  for (shm::UniqueFd& connection : change->waiting) {
    send_reply(connection.get(), shm::AttachStatus::kOk, message);
    release_connection(std::move(connection), 0);
  }
  if (change->load_after) start_load(model, "declared again by a reload while it unloaded");
}

void Daemon::finish_load(ModelPipeline& model) {
  std::unique_ptr<ModelChange> change = std::move(changes_[model.id()]);
  change->loader.join();
  shm::AttachStatus status = shm::AttachStatus::kOk;
  std::string message;
  if (change->result) {
    try {
      std::lock_guard lock(models_mu_);
      model.load(std::move(*change->result));
    } catch (const std::exception& e) {
      change->result = make_failure(std::errc::io_error, e.what());
    }
  }
  const double seconds = static_cast<double>(shm::monotonic_ns() - change->started_ns) / 1e9;
  if (change->result) {
    message = fmt::format("model {} is loaded ({:.3f} s; backend {}, {} devices)", model.config().name, seconds,
                          model.backend_name(), model.backend().devices());
    spdlog::info("{}", message);
    status_.publish_model_name(model.id());  // its backend by name ("auto" made one)
    status_.publish_policy(model);
  } else {
    model.abort_load();
    status = shm::AttachStatus::kModelLoadFailed;
    message = "model " + model.config().name + " did not load: " + change->result.error().message;
    spdlog::error("{}", message);
  }
  for (shm::UniqueFd& connection : change->waiting) {
    send_reply(connection.get(), status, message);
    release_connection(std::move(connection), 0);
  }
  // A reload dropped it while it loaded: it goes now, as it would have then.
  if (change->remove_after) {
    if (change->result) {
      begin_removal(model);
    } else {
      model.remove();
    }
  }
}

void Daemon::abandon_model_changes() {
  for (auto& change : changes_) {
    if (change == nullptr) continue;
    if (change->loader.joinable()) change->loader.join();
    for (shm::UniqueFd& connection : change->waiting) {
      send_reply(connection.get(), shm::AttachStatus::kShuttingDown, "the daemon is shutting down");
      release_connection(std::move(connection), 0);
    }
    change.reset();
  }
}

void Daemon::reload(const DaemonConfig& fresh) {
  {
    std::lock_guard lock(reload_mu_);
    reload_ = fresh;
  }
  reload_pending_.store(true, std::memory_order_release);
  ring_doorbell();
}

void Daemon::apply_reload() {
  if (!reload_pending_.exchange(false, std::memory_order_acq_rel)) return;
  std::optional<DaemonConfig> fresh;
  {
    std::lock_guard lock(reload_mu_);
    fresh.swap(reload_);
  }
  if (!fresh || stop_requested_.load(std::memory_order_relaxed)) return;
  models_.front()->update_limits(fresh->batch);  // logs the policy it applies
  models_.front()->set_floors(fresh->normal_floor_percent, fresh->low_floor_percent);
  std::vector<bool> declared(models_.size(), false);
  declared.front() = true;  // the top level: never removed
  for (const ModelConfig& config : fresh->models) {
    const auto it = std::find_if(models_.begin() + 1, models_.end(),
                                 [&](const auto& m) { return m->config().name == config.name; });
    if (it == models_.end()) {
      add_model(config);
      declared.push_back(true);
      continue;
    }
    ModelPipeline& model = **it;
    declared[model.id()] = true;
    keep_model(model);
    const bool was_removed = model.lifecycle() == ModelPipeline::Lifecycle::kRemoved;
    {
      std::lock_guard lock(models_mu_);
      model.redeclare(config);
    }
    model.update_limits(config.settings.batch);
    if (was_removed) {
      // Declared again: back at its id, which clients may still hold.
      model.restore();
      status_.publish_model_name(model.id());
      start_load(model, "declared again by a reload");
    } else if (model.lifecycle() == ModelPipeline::Lifecycle::kUnloaded) {
      status_.publish_model_name(model.id());
    } else {
      spdlog::info("model {}: reload: new batching limits now; its other settings at its next load", config.name);
    }
  }
  limits_changed_.store(true, std::memory_order_release);
  for (std::size_t m = 1; m < models_.size(); ++m) {
    if (!declared[m]) remove_model(*models_[m]);
  }
}

void Daemon::add_model(const ModelConfig& config) {
  if (models_.size() >= kMaxModels) {
    spdlog::error("reload: model {} not added: at most {} models in one daemon (removed ones keep their ids)",
                  config.name, kMaxModels);
    return;
  }
  const auto id = static_cast<std::uint32_t>(models_.size());
  auto made = std::make_unique<ModelPipeline>(id, config, nullptr, stats_, completer_);
  ModelPipeline& model = *made;
  model.set_hooks(hooks_for(model));
  {
    std::lock_guard lock(models_mu_);  // the publisher walks models_ and workers_models_
    models_.push_back(std::move(made));
    if (model.by_workers()) workers_models_.push_back(&model);
  }
  changes_.resize(models_.size());
  status_.publish_model_name(id);
  status_.publish_policy(model);
  spdlog::info("model {} (id {}, version {}): added by a reload", config.name, id, config.version);
  start_load(model, "added by a reload");
}

void Daemon::remove_model(ModelPipeline& model) {
  using Lifecycle = ModelPipeline::Lifecycle;
  std::unique_ptr<ModelChange>& change = changes_[model.id()];
  switch (model.lifecycle()) {
    case Lifecycle::kRemoved: return;
    case Lifecycle::kUnloaded:
      model.remove();
      return;
    case Lifecycle::kUnloading:
      change->remove_after = true;
      change->load_after = false;
      return;
    case Lifecycle::kLoading:
      // Its backend is being made: the load ends first (finish_load), then the removal.
      change->remove_after = true;
      spdlog::info("model {}: reload dropped it while it loads: removed once loaded", model.config().name);
      return;
    case Lifecycle::kLoaded:
      begin_removal(model);
      return;
  }
}

void Daemon::begin_removal(ModelPipeline& model) {
  std::unique_ptr<ModelChange>& change = changes_[model.id()];
  change = std::make_unique<ModelChange>();
  change->started_ns = shm::monotonic_ns();
  change->remove_after = true;
  model.begin_unload();
  spdlog::info("model {}: reload dropped it: admitting nothing more, answering the {} requests it holds",
               model.config().name, model.waiting());
}

void Daemon::keep_model(ModelPipeline& model) {
  ModelChange* change = changes_[model.id()].get();
  if (change == nullptr || !change->remove_after) return;
  change->remove_after = false;
  // An unload that was the removal loads it again once done; a load simply goes on.
  change->load_after = model.lifecycle() == ModelPipeline::Lifecycle::kUnloading;
  spdlog::info("model {}: declared again by a reload: kept{}", model.config().name,
               change->load_after ? " (loaded again once its unload ends)" : "");
}

}  // namespace batchd

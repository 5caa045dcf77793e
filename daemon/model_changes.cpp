#include "daemon/model_changes.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>

#include "shm/clock.hpp"

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

}  // namespace

ModelChanges::ModelChanges(ModelRegistry& models, StatusWriter& status, DaemonStats& stats, Completer& completer,
                           Host& host) noexcept
    : models_(models), status_(status), stats_(stats), completer_(completer), host_(host) {}

ModelChanges::~ModelChanges() {
  for (auto& change : changes_) {
    if (change != nullptr && change->loader.joinable()) change->loader.join();
  }
}

std::unique_ptr<ModelChanges::Change>& ModelChanges::of(const ModelPipeline& model) {
  // Grows once a reload added models: no reference into it is held across an add().
  if (changes_.size() < models_.size()) changes_.resize(models_.size());
  return changes_[model.id()];
}

std::optional<ModelChanges::Refusal> ModelChanges::request(ModelPipeline& model, bool load, shm::UniqueFd& connection,
                                                           const PeerCredentials& peer) {
  const std::string& name = model.config().name;
  const auto lifecycle = model.lifecycle();
  using Lifecycle = ModelPipeline::Lifecycle;
  if (load ? lifecycle == Lifecycle::kLoaded : lifecycle == Lifecycle::kUnloaded) {
    send_reply(connection.get(), shm::AttachStatus::kOk, "model " + name + (load ? " is loaded" : " is unloaded"));
    return std::nullopt;
  }
  if (load ? lifecycle == Lifecycle::kUnloading : lifecycle == Lifecycle::kLoading) {
    return Refusal{shm::AttachStatus::kModelChanging,
                   "model " + name + (load ? " is unloading (answering what it holds); load it once that is done"
                                           : " is loading; unload it once that is done")};
  }
  std::unique_ptr<Change>& change = of(model);
  if (change != nullptr && change->waiting.size() >= kMaxWaiting) {
    return Refusal{shm::AttachStatus::kBusy,
                   "too many callers already wait for model " + name + "'s " + (load ? "load" : "unload")};
  }
  if (load && lifecycle == Lifecycle::kUnloaded && !loader_) {
    return Refusal{shm::AttachStatus::kModelLoadFailed, "this daemon cannot load models (it has no model loader)"};
  }
  if (change == nullptr) {
    if (load) {
      const std::string why = fmt::format("asked by pid {} uid {}", peer.pid, peer.uid);
      start_load(model, why.c_str());
    } else {
      change = std::make_unique<Change>();
      change->started_ns = shm::monotonic_ns();
      model.begin_unload();
      spdlog::info("model {}: unloading: admitting nothing more, answering the {} requests it holds (asked by "
                   "pid {} uid {})",
                   name, model.waiting(), peer.pid, peer.uid);
    }
  }
  change->waiting.push_back(std::move(connection));
  host_.wake();  // the next pass looks at it
  return std::nullopt;
}

bool ModelChanges::start_load(ModelPipeline& model, const char* why) {
  std::unique_ptr<Change>& change = of(model);
  if (change != nullptr || !loader_) {
    spdlog::error("model {}: cannot load it now ({})", model.config().name,
                  change != nullptr ? "it is being loaded or unloaded" : "this daemon has no model loader");
    return false;
  }
  change = std::make_unique<Change>();
  change->started_ns = shm::monotonic_ns();
  model.begin_load();
  Change* raw = change.get();
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
    host_.wake();
  });
  spdlog::info("model {}: loading ({})", model.config().name, why);
  return true;
}

void ModelChanges::advance() {
  for (const auto& model : models_) {
    Change* change = of(*model).get();
    if (change == nullptr) continue;
    if (model->lifecycle() == ModelPipeline::Lifecycle::kUnloading) {
      // A batch that waits for a worker waits no more once none is attached to run it.
      if (model->workers() != nullptr && model->workers()->attached() == 0) model->router().abandon_waiting();
      if (model->unloading_done()) finish_unload(*model);
    } else if (change->made.load(std::memory_order_acquire)) {
      finish_load(*model);
    }
  }
}

void ModelChanges::answer_all(Change& change, shm::AttachStatus status, const std::string& message) {
  for (shm::UniqueFd& connection : change.waiting) {
    send_reply(connection.get(), status, message);
    host_.answered(std::move(connection));
  }
  change.waiting.clear();
}

void ModelChanges::finish_unload(ModelPipeline& model) {
  host_.drop_workers_of(model);
  {
    std::lock_guard lock(models_.mu());
    model.release();
  }
  std::unique_ptr<Change> change = std::move(of(model));
  const double seconds = static_cast<double>(shm::monotonic_ns() - change->started_ns) / 1e9;
  const std::string message = fmt::format("model {} is unloaded ({:.3f} s)", model.config().name, seconds);
  spdlog::info("{}", message);
  if (change->remove_after) model.remove();
  answer_all(*change, shm::AttachStatus::kOk, message);
  if (change->load_after) start_load(model, "declared again by a reload while it unloaded");
}

void ModelChanges::finish_load(ModelPipeline& model) {
  std::unique_ptr<Change> change = std::move(of(model));
  change->loader.join();
  shm::AttachStatus status = shm::AttachStatus::kOk;
  std::string message;
  if (change->result) {
    try {
      std::lock_guard lock(models_.mu());
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
  answer_all(*change, status, message);
  // A reload dropped it while it loaded: it goes now, as it would have then.
  if (change->remove_after) {
    if (change->result) {
      begin_removal(model);
    } else {
      model.remove();
    }
  }
}

void ModelChanges::abandon() {
  for (auto& change : changes_) {
    if (change == nullptr) continue;
    if (change->loader.joinable()) change->loader.join();
    answer_all(*change, shm::AttachStatus::kShuttingDown, "the daemon is shutting down");
    change.reset();
  }
}

void ModelChanges::reload(const DaemonConfig& fresh) {
  models_.front().update_limits(fresh.batch);  // logs the policy it applies
  models_.front().set_floors(fresh.normal_floor_percent, fresh.low_floor_percent);
  std::vector<bool> declared(models_.size(), false);
  declared.front() = true;  // the top level: never removed
  for (const ModelConfig& config : fresh.models) {
    const auto it = std::find_if(models_.begin() + 1, models_.end(),
                                 [&](const auto& m) { return m->config().name == config.name; });
    if (it == models_.end()) {
      add(config);
      declared.push_back(true);
      continue;
    }
    ModelPipeline& model = **it;
    declared[model.id()] = true;
    keep(model);
    const bool was_removed = model.lifecycle() == ModelPipeline::Lifecycle::kRemoved;
    {
      std::lock_guard lock(models_.mu());
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
  for (std::size_t m = 1; m < models_.size(); ++m) {
    if (!declared[m]) remove(*models_[m]);
  }
}

void ModelChanges::add(const ModelConfig& config) {
  if (models_.size() >= kMaxModels) {
    spdlog::error("reload: model {} not added: at most {} models in one daemon (removed ones keep their ids)",
                  config.name, kMaxModels);
    return;
  }
  const auto id = static_cast<std::uint32_t>(models_.size());
  auto made = std::make_unique<ModelPipeline>(id, config, nullptr, stats_, completer_);
  made->set_hooks(host_.hooks_for(*made));
  ModelPipeline& model = models_.add(std::move(made));
  status_.publish_model_name(id);
  status_.publish_policy(model);
  spdlog::info("model {} (id {}, version {}): added by a reload", config.name, id, config.version);
  start_load(model, "added by a reload");
}

void ModelChanges::remove(ModelPipeline& model) {
  using Lifecycle = ModelPipeline::Lifecycle;
  std::unique_ptr<Change>& change = of(model);
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

void ModelChanges::begin_removal(ModelPipeline& model) {
  std::unique_ptr<Change>& change = of(model);
  change = std::make_unique<Change>();
  change->started_ns = shm::monotonic_ns();
  change->remove_after = true;
  model.begin_unload();
  spdlog::info("model {}: reload dropped it: admitting nothing more, answering the {} requests it holds",
               model.config().name, model.waiting());
}

void ModelChanges::keep(ModelPipeline& model) {
  Change* change = of(model).get();
  if (change == nullptr || !change->remove_after) return;
  change->remove_after = false;
  // An unload that was the removal loads it again once done; a load simply goes on.
  change->load_after = model.lifecycle() == ModelPipeline::Lifecycle::kUnloading;
  spdlog::info("model {}: declared again by a reload: kept{}", model.config().name,
               change->load_after ? " (loaded again once its unload ends)" : "");
}

}  // namespace batchd

// Model control (shm/model_control.hpp: batchctl load/unload, the front-ends' repository routes)
// and SIGHUP's reloads, as changes to the models served: an unload stops admitting the model's
// requests at once, answers what it holds, then releases its lanes, router and backend; a load
// makes the backend again on a thread of its own (a GPU's start may take seconds) and the drain
// loop runs it once made. Either leaves every other model untouched. A reload goes the same ways:
// a model added is loaded, one dropped is unloaded and removed. Callers of model control wait on
// their connections, answered once the change is done. The drain thread's, but for the loaders.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/completer.hpp"
#include "daemon/config.hpp"
#include "daemon/control_socket.hpp"
#include "daemon/model_registry.hpp"
#include "daemon/stats.hpp"
#include "daemon/status_writer.hpp"
#include "shm/attach_protocol.hpp"
#include "shm/fd.hpp"

namespace batchd {

class ModelChanges {
 public:
  // What a change needs of the daemon around it.
  class Host {
   public:
    virtual ~Host() = default;
    // The model is about to release its backend: the workers attached to it go first (their
    // links reference its router's devices).
    virtual void drop_workers_of(ModelPipeline& model) = 0;
    // A waiting caller is answered: the connection is the host's to release.
    virtual void answered(shm::UniqueFd connection) = 0;
    // The hooks a model's router is made with (a model a reload adds).
    virtual ModelPipeline::Hooks hooks_for(ModelPipeline& model) = 0;
    // Any thread (a loader): a change wants the drain loop's attention.
    virtual void wake() noexcept = 0;
  };

  // Makes a model's backend again when it is loaded; run on a thread of its own.
  using Loader = std::function<Expected<std::unique_ptr<Backend>>(const ModelConfig&)>;
  // At most this many callers wait for one model's change; more are refused as busy.
  static constexpr std::size_t kMaxWaiting = 16;

  ModelChanges(ModelRegistry& models, StatusWriter& status, DaemonStats& stats, Completer& completer,
               Host& host) noexcept;
  ~ModelChanges();  // joins the loaders (abandon() answers their callers first)
  ModelChanges(const ModelChanges&) = delete;
  ModelChanges& operator=(const ModelChanges&) = delete;

  // Before start(): without a loader, loads are refused.
  void set_loader(Loader loader) { loader_ = std::move(loader); }

  // A model-control caller asks for `model` to be loaded or unloaded. Returns why not (the
  // caller refuses), or nothing: `connection` was answered at once (nothing to do) and is left to
  // the caller, or was taken and is answered once the change is done.
  struct Refusal {
    shm::AttachStatus status;
    std::string why;
  };
  std::optional<Refusal> request(ModelPipeline& model, bool load, shm::UniqueFd& connection,
                                 const PeerCredentials& peer);
  // Each drain pass: an unloading model whose requests are all answered is released, a loading
  // one whose backend is made runs; their callers are answered.
  void advance();
  // SIGHUP's re-read config, on the drain loop.
  void reload(const DaemonConfig& fresh);
  // Stopping: loads under way are waited for, and every caller still waiting is told.
  void abandon();

 private:
  // One model's load or unload under way.
  struct Change {
    std::vector<shm::UniqueFd> waiting;
    bool remove_after = false;  // a reload dropped the model: removed once unloaded (or loaded)
    bool load_after = false;    // a later reload declared it again: loaded once unloaded
    std::thread loader;
    std::atomic<bool> made{false};  // the loader thread has left its result
    Expected<std::unique_ptr<Backend>> result{std::unique_ptr<Backend>{}};
    std::int64_t started_ns = 0;
  };

  // Starts a load with nobody waiting for its answer yet; false (logged) when it cannot start: no
  // loader, or a change under way.
  bool start_load(ModelPipeline& model, const char* why);
  void finish_unload(ModelPipeline& model);
  void finish_load(ModelPipeline& model);
  void answer_all(Change& change, shm::AttachStatus status, const std::string& message);
  void add(const ModelConfig& config);
  void remove(ModelPipeline& model);
  // A loaded model a reload dropped: it admits nothing more, and is removed once what it holds is
  // answered.
  void begin_removal(ModelPipeline& model);
  // A reload declares a model again that an earlier one dropped while it loaded or unloaded: it
  // is kept (and loaded again, after an unload), not removed.
  void keep(ModelPipeline& model);
  [[nodiscard]] std::unique_ptr<Change>& of(const ModelPipeline& model);

  ModelRegistry& models_;
  StatusWriter& status_;
  DaemonStats& stats_;
  Completer& completer_;
  Host& host_;
  Loader loader_;
  std::vector<std::unique_ptr<Change>> changes_;  // by model id; null: none under way
};

}  // namespace batchd

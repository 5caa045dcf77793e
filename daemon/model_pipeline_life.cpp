// One model's life in the daemon: made from its config (fitted to its backend), its router and
// lanes prepared and started, unloaded and released, loaded again, stopped; a reload's
// declaration of it (model_pipeline.hpp). Its drain-and-batch path is in model_pipeline.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "daemon/model_pipeline.hpp"

namespace batchd {

ModelPipeline::ModelPipeline(std::uint32_t id, ModelConfig config, std::unique_ptr<Backend> backend,
                             DaemonStats& stats, Completer& completer)
    : id_(id), config_(std::move(config)), backend_(std::move(backend)), stats_(stats), completer_(completer),
      batcher_(config_.settings.batch), policy_(config_.settings.batch) {
  declared_ = config_;
  set_floors(config_.settings.normal_floor_percent, config_.settings.low_floor_percent);
  if (backend_ == nullptr) {
    backend_name_ = config_.settings.backend;
    by_workers_ = config_.settings.backend == "workers";
    lifecycle_.store(Lifecycle::kUnloaded, std::memory_order_relaxed);
    return;
  }
  backend_name_ = std::string(backend_->name());
  fit_to_new_backend("start");
  by_workers_ = workers_ != nullptr;
}

void ModelPipeline::set_floors(std::uint32_t normal_percent, std::uint32_t low_percent) noexcept {
  config_.settings.normal_floor_percent = normal_percent;
  config_.settings.low_floor_percent = low_percent;
  pending_.set_floors({0, normal_percent / 100.0, low_percent / 100.0});
}

void ModelPipeline::redeclare(const ModelConfig& config) {
  declared_ = config;
  // Scheduling, not the backend's: at once, loaded or not.
  set_floors(config.settings.normal_floor_percent, config.settings.low_floor_percent);
  // The running backend keeps the settings it was made with until the next load.
  if (backend_ == nullptr) {
    const BatchLimits batch = config_.settings.batch;
    config_ = config;
    config_.settings.batch = batch;  // update_limits carries the new ones
    backend_name_ = config_.settings.backend;
  }
}

void ModelPipeline::fit_to_new_backend(const char* when) {
  ModelSettings& settings = config_.settings;
  workers_ = dynamic_cast<WorkerBackend*>(backend_.get());
  // Workers come and go: a batch waits for one rather than failing while none is attached.
  if (workers_ != nullptr) settings.routing.wait_for_devices = true;
  settings.batch = fit_to_backend(settings.batch, when);
  fit_timeout_to_backend();
  batcher_.set_limits(settings.batch);
  policy_.set_limits(settings.batch);
}

void ModelPipeline::begin_unload() noexcept {
  lifecycle_.store(Lifecycle::kUnloading, std::memory_order_release);
  completer_.caches().stop_model(id_);  // its records go: the next load may be another version
  stopping_ = true;
}

void ModelPipeline::release() noexcept {
  stop();
  router_.reset();  // before the arena its batches point into, and the backend it runs
  input_arena_ = InputArena{};
  workers_ = nullptr;
  backend_.reset();
  recheck_ns_ = 0;
  held_for_lane_ = false;
  stopping_ = false;
  lifecycle_.store(Lifecycle::kUnloaded, std::memory_order_release);
}

void ModelPipeline::load(std::unique_ptr<Backend> backend) {
  if (backend == nullptr) throw std::invalid_argument("model " + config_.name + ": the loader made no backend");
  const BatchLimits batch = config_.settings.batch;  // the latest, reloads included
  config_ = declared_;
  config_.settings.batch = batch;
  backend_ = std::move(backend);
  backend_name_ = std::string(backend_->name());
  try {
    fit_to_new_backend("load");
    prepare(hooks_);
    start_lanes();
  } catch (...) {
    router_.reset();
    input_arena_ = InputArena{};
    workers_ = nullptr;
    backend_.reset();
    throw;
  }
  lifecycle_.store(Lifecycle::kLoaded, std::memory_order_release);
}

ModelPipeline::~ModelPipeline() { stop(); }

void ModelPipeline::stop() noexcept {
  if (!router_) return;
  if (open_ != nullptr) router_->release(open_);
  open_ = nullptr;
  router_->stop();
}

// The hang timeout is raised rather than the start refused: a configuration that is merely costly
// still serves, and the warning says what to set.
void ModelPipeline::fit_timeout_to_backend() {
  RouterOptions& routing = config_.settings.routing;
  const auto worst = std::chrono::ceil<std::chrono::milliseconds>(backend_->worst_batch_time());
  if (worst <= routing.device_timeout) return;
  spdlog::warn("model {}: start: --device-timeout-ms {} is shorter than the largest batch may take on a "
               "healthy {} device at this cost and batch size (up to {} ms); using {} ms so that "
               "it does not look hung",
               config_.name, routing.device_timeout.count(), backend_->name(), worst.count(), worst.count());
  routing.device_timeout = worst;
}

BatchLimits ModelPipeline::fit_to_backend(BatchLimits limits, const char* when) const {
  const BatchCapacity capacity = backend_->capacity();
  if (limits.max_batch_from_backend && capacity.fill_inputs > limits.max_batch) {
    limits.max_batch = std::min(capacity.fill_inputs, capacity.max_inputs);
    spdlog::info("model {}: {}: max batch {}, what keeps the {} backend's devices full with every lane "
                 "running a batch (--max-batch sets a fixed ceiling)",
                 config_.name, when, limits.max_batch, backend_->name());
  }
  if (limits.max_batch > capacity.max_inputs) {
    spdlog::warn("model {}: {}: max batch {} is more than the {} backend can run ({}: it sizes its buffers at "
                 "start; restart the daemon to change that); using {}",
                 config_.name, when, limits.max_batch, backend_->name(), capacity.max_inputs, capacity.max_inputs);
    limits.max_batch = capacity.max_inputs;
  }
  if (limits.max_batch_bytes > capacity.max_bytes) {
    spdlog::warn("model {}: {}: max batch bytes {} is more than the {} backend can run ({}: it sizes its buffers "
                 "at start; restart the daemon to change that); using {}",
                 config_.name, when, limits.max_batch_bytes, backend_->name(), capacity.max_bytes, capacity.max_bytes);
    limits.max_batch_bytes = capacity.max_bytes;
  }
  return limits;
}

void ModelPipeline::remove() noexcept {
  lifecycle_.store(Lifecycle::kRemoved, std::memory_order_release);
  spdlog::info("model {} is removed (a reload dropped it from the config)", config_.name);
}

void ModelPipeline::prepare(Hooks hooks) {
  hooks_ = hooks;
  RouterOptions routing = config_.settings.routing;
  // The warm-up's batches as the policy would make them (its limits are fitted to the backend).
  for (std::uint32_t& size : routing.warmup.batch_sizes) size = std::min(size, limits().max_batch);
  routing.warmup.max_batch_bytes = limits().max_batch_bytes;
  router_ = std::make_unique<Router>(*backend_, completer_, std::move(routing), std::move(hooks.on_batch_freed),
                                     std::move(hooks.on_tick));
  if (workers_ != nullptr) {
    create_input_arena();
    // Every place starts empty: a worker that attaches opens one (attach_worker.cpp).
    for (unsigned d = 0; d < backend_->devices(); ++d) router_->close_device(d);
  }
  if (const std::string_view group = backend_->device_group(); !group.empty() && hooks_.device_groups != nullptr) {
    router_->share_devices(hooks_.device_groups->get(group, backend_->streams_per_device()));
    spdlog::info("model {}: its {} devices are shared with the daemon's other {} models: they take turns there",
                 config_.name, backend_->devices(), group);
  }
  router_->set_dead_letters(hooks_.dead_letters, config_.name);
  if (hooks_.tracer != nullptr) hooks_.tracer->set_model(id_, config_.name, declared_.version);
  router_->set_latency(&stats_.latency, &stats_.by_model[id_], id_ == 0);
  completer_.caches().start_model(id_, config_.settings);
}

void ModelPipeline::create_input_arena() {
  const BatchLimits& batch = config_.settings.batch;
  // A slot holds a whole batch up to this; a larger one (--max-batch-bytes past it) is assembled on
  // the heap and copied into the worker's buffer. A worker can make the whole arena resident (read
  // faults on a memfd allocate), so this bounds what it can pin: slots x 16 MiB at most.
  constexpr std::uint64_t kMaxSlotBytes = std::uint64_t{16} << 20;
  auto arena = InputArena::create(router_->pool_size(), batch.max_batch, std::min(batch.max_batch_bytes, kMaxSlotBytes));
  if (!arena) throw std::runtime_error("cannot create the input arena for workers: " + arena.error().message);
  input_arena_ = std::move(*arena);
  router_->place_batches_in(input_arena_);
  spdlog::info("model {}: workers read batches in place: an input arena of {} slots ({} MiB, sparse; a worker may "
               "make all of it resident)",
               config_.name, input_arena_.slots(), input_arena_.size_bytes() >> 20);
}

}  // namespace batchd

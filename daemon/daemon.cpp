// The daemon's life: start-up (io_uring, status page, control socket, router), the drain loop
// that ties the other parts together, the status page and policy it publishes, and the
// watchdog. The parts: daemon_attach.cpp (handshake), daemon_batching.cpp (drain and batch),
// daemon_io.cpp (io_uring events and sleeping), daemon_shutdown.cpp (stopping).
#include "daemon/daemon.hpp"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cstring>
#include <stdexcept>

#include "client_lib/status_metrics.hpp"
#include "client_lib/status_read.hpp"
#include "daemon/fd_limit.hpp"
#include "daemon/io_ops.hpp"
#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

namespace {

constexpr unsigned kRingEntries = 512;

void publish_histogram(const LatencyHistogram& from, shm::StatusHistogram& to) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  for (std::size_t b = 0; b < shm::kLatencyBuckets; ++b) to.buckets[b].store(from.buckets[b].load(relaxed), relaxed);
  to.sum_ns.store(from.sum_ns.load(relaxed), relaxed);
}

}  // namespace

namespace {

// NUL-padded text into a status table's words (atomics: a reader in this process races nothing).
template <std::size_t N>
void put_text(std::string_view text, std::atomic<std::uint64_t> (&words)[N]) noexcept {
  char padded[N * 8] = {};
  std::memcpy(padded, text.data(), std::min(text.size(), sizeof(padded)));
  for (std::size_t w = 0; w < N; ++w) {
    std::uint64_t word = 0;
    std::memcpy(&word, padded + w * 8, 8);
    words[w].store(word, std::memory_order_relaxed);
  }
}

std::vector<std::unique_ptr<Backend>> one(std::unique_ptr<Backend> backend) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  return backends;
}

}  // namespace

Daemon::Daemon(DaemonConfig config, std::unique_ptr<Backend> backend) : Daemon(std::move(config), one(std::move(backend))) {}

Daemon::Daemon(DaemonConfig config, std::vector<std::unique_ptr<Backend>> backends) : config_(std::move(config)) {
  if (config_.socket_path.empty()) config_.socket_path = default_socket_path();
  if (backends.size() != config_.models.size() + 1) {
    throw std::invalid_argument("the daemon needs one backend per model (" + std::to_string(config_.models.size() + 1) +
                                "), got " + std::to_string(backends.size()));
  }
  if (backends.size() > kMaxModels) {
    throw std::invalid_argument("at most " + std::to_string(kMaxModels) + " models in one daemon");
  }
  ModelConfig batchstring{kDefaultModelName, config_.default_model_version, config_};
  for (std::size_t m = 0; m < backends.size(); ++m) {
    ModelConfig model = m == 0 ? batchstring : config_.models[m - 1];
    if (model_named(model.name) != nullptr) throw std::invalid_argument("two models are named " + model.name);
    models_.push_back(std::make_unique<ModelPipeline>(static_cast<std::uint32_t>(m), std::move(model),
                                                      std::move(backends[m]), stats_, completer_));
    if (models_.back()->by_workers()) workers_models_.push_back(models_.back().get());
  }
  changes_.resize(models_.size());
}

bool Daemon::all_devices_lost() const noexcept {
  // One model's devices lost for good is the process's state (CUDA's sticky errors): only a new
  // process serves them again, so the daemon exits for its service manager to restart it.
  return std::any_of(models_.begin(), models_.end(),
                     [](const auto& m) { return m->running() && m->router().all_devices_lost(); });
}

Daemon::~Daemon() {
  stop_publisher();
  abandon_model_changes();
  for (auto& model : models_) model->stop();
  if (dead_letters_) dead_letters_->stop();  // writes what the lanes recorded last
  if (ring_ready_) io_uring_queue_exit(&ring_);
  // The ring's polls are gone with it: the connections still parked for them (and those of
  // handshakes never finished) close on the reaper, whatever a peer queued on them.
  for (auto& [user_data, fd] : parked_) reaper_.drop(std::move(fd));
  for (auto& [id, pending] : attaching_) reaper_.drop(std::move(pending.connection));
}

void Daemon::start() {
  if (auto usable = shm::check_params(config_.segment); !usable) {
    throw std::invalid_argument("bad segment parameters: " + usable.error().message);
  }
  for (const auto& model : models_) {
    const BatchLimits& batch = model->limits();
    const std::string of = models_.size() > 1 ? " (model " + model->config().name + ")" : "";
    if (batch.max_batch == 0) throw std::invalid_argument("max batch must be at least 1" + of);
    if (batch.max_batch_bytes > kMaxBatchBytes) {
      // Backends address a batch's inputs with 32-bit offsets.
      throw std::invalid_argument("--max-batch-bytes (" + std::to_string(batch.max_batch_bytes) +
                                  ") must not exceed " + std::to_string(kMaxBatchBytes) + of);
    }
    if (config_.segment.max_input_bytes > batch.max_batch_bytes) {
      // A batch holds at least one input, and backends size their buffers by the byte budget.
      throw std::invalid_argument("--max-input-bytes (" + std::to_string(config_.segment.max_input_bytes) +
                                  ") must not exceed --max-batch-bytes (" + std::to_string(batch.max_batch_bytes) +
                                  ")" + of);
    }
  }
  // steady_clock is CLOCK_MONOTONIC on Linux: the clock of every deadline in shared memory.
  static_assert(std::chrono::steady_clock::is_steady);
  if (!doorbell_reads_never_block()) {
    throw std::runtime_error("this kernel cannot read an eventfd with RWF_NOWAIT (Linux 5.12 or "
                             "later is needed): a client could block the daemon through its doorbell");
  }
  const std::uint64_t fd_limit = raise_fd_limit();
  if (const std::uint64_t needed = fds_needed(config_.max_clients, kMaxAttaching); fd_limit < needed) {
    throw std::invalid_argument(
        "--max-clients " + std::to_string(config_.max_clients) + " needs about " +
        std::to_string(needed) + " open files, but the limit is " + std::to_string(fd_limit) +
        " (raise it with ulimit -n or LimitNOFILE=, or lower --max-clients)");
  }

  const int rc = io_uring_queue_init(kRingEntries, &ring_, 0);
  if (rc < 0) {
    throw std::runtime_error(std::string("io_uring is not available: ") + std::strerror(-rc));
  }
  ring_ready_ = true;

  doorbell_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!doorbell_.valid()) throw std::system_error(errno, std::generic_category(), "eventfd");
  create_status_file();

  // Before the socket: a dead-letter file that cannot be opened stops the start with its reason.
  dead_letters_ = std::make_unique<DeadLetterLog>(config_.dead_letters);
  dead_letters_->start();
  control_ = std::make_unique<ControlSocket>(config_.socket_path, config_.refuse_passed_fds);
  if (control_->refuses_fds()) {
    spdlog::info("control socket: the kernel refuses descriptors sent by peers (SO_PASSRIGHTS)");
  } else {
    spdlog::info("control socket: descriptors a peer sends are taken and closed on the reaper's "
                 "threads (this kernel cannot refuse them; SO_PASSRIGHTS needs Linux 6.16)");
  }
  for (auto& model : models_) model->prepare(hooks_for(*model));
  publish_model_names();
  publish_policy();
  publish_status();
  start_metrics_listener();
  for (auto& model : models_) model->start_lanes();
  // As often as the quickest router's watchdog looks at its devices: the page is as fresh as
  // what it shows.
  for (const auto& model : models_) {
    publish_period_ = std::min(publish_period_, std::clamp(model->config().settings.routing.device_timeout / 4,
                                                           std::chrono::milliseconds(1), std::chrono::milliseconds(50)));
  }
  publisher_ = std::thread([this] { publish_until_stopped(); });
  arm_poll(control_->fd(), pack(Op::kListen, 0));
  arm_doorbell_read();
  const auto describe = [](const ModelPipeline& model) {
    const BatchLimits& batch = model.limits();
    return fmt::format("backend {}: {} devices x {} streams; policy {}, max batch {}, max wait {} us, max batch "
                       "bytes {}",
                       model.backend_name(), model.backend().devices(), model.backend().streams_per_device(),
                       policy_name(batch.policy), batch.max_batch,
                       std::chrono::duration_cast<std::chrono::microseconds>(batch.max_wait).count(),
                       batch.max_batch_bytes);
  };
  spdlog::info("batchd listening on {} ({}; dead letters {})", config_.socket_path, describe(*models_.front()),
               config_.dead_letters.path.empty() ? std::string("in memory only") : "to " + config_.dead_letters.path);
  for (std::size_t m = 1; m < models_.size(); ++m) {
    spdlog::info("model {} (id {}, version {}): {}", models_[m]->config().name, m, models_[m]->config().version,
                 describe(*models_[m]));
  }
}

ModelPipeline::Hooks Daemon::hooks_for(ModelPipeline& model) {
  ModelPipeline* self = &model;
  ModelPipeline::Hooks hooks;
  hooks.on_batch_freed = [this] {
    // After the batch's seq_cst return to the pool (Router::release).
    if (status_->drain_sleeping.load(std::memory_order_seq_cst) != 0) ring_doorbell();
  };
  hooks.on_tick = [this, self] {
    // The default model's devices are the page's: its watchdog publishes at once what it saw (a
    // failed batch's callers are answered after this), unless a load or unload holds the models
    // (the publisher thread then catches up).
    if (self->id() == 0) {
      std::unique_lock lock(models_mu_, std::try_to_lock);
      if (lock.owns_lock()) publish_status_locked();
    }
    if (self->router().all_devices_lost()) ring_doorbell();  // the drain loop exits (run())
  };
  hooks.dead_letters = dead_letters_.get();
  return hooks;
}

void Daemon::create_status_file() {
  // Start-up: a failure here is the operator's to see, so value() throws it.
  status_fd_ = shm::create_memfd("batchd-status", shm::kStatusFileBytes).value();
  status_map_ = shm::map_fd(status_fd_.get(), shm::kStatusFileBytes, true).value();
  shm::seal_memfd(status_fd_.get(), true).value();
  char* base = static_cast<char*>(status_map_.get_address());
  status_ = new (base) shm::DaemonStatusPage{};
  status_->magic = shm::kStatusMagic;
  latency_ = new (base + shm::kStatusLatencyOffset) shm::StatusLatency{};
  latency_->magic = shm::kStatusLatencyMagic;
  latency_->version = shm::kStatusLatencyVersion;
  latency_->buckets = shm::kLatencyBuckets;
  latency_->classes = shm::kWirePriorities;
  latency_->devices = shm::kStatusDevices;
  workers_page_ = new (base + shm::kStatusWorkersOffset) shm::StatusWorkers{};
  workers_page_->magic = shm::kStatusWorkersMagic;
  workers_page_->version = shm::kStatusWorkersVersion;
  workers_page_->places = shm::kStatusDevices;
  models_page_ = new (base + shm::kStatusModelsOffset) shm::StatusModels{};
  models_page_->version = shm::kStatusModelsVersion;
  models_page_->capacity = shm::kStatusModels;
  status_->daemon_pid = static_cast<std::uint32_t>(::getpid());
  // Daemon-wide, each workers model's minimum counts: a model's own readiness is its state in
  // the models table.
  unsigned min_workers = 0;
  for (const ModelPipeline* model : workers_models_) min_workers += model->config().settings.workers.min_workers;
  status_->min_workers.store(min_workers, std::memory_order_relaxed);
  const std::string_view backend = models_.front()->backend_name();
  std::snprintf(status_->backend, sizeof(status_->backend), "%.*s", static_cast<int>(backend.size()), backend.data());
}

void Daemon::publish_model_names() noexcept {
  for (std::size_t m = 0; m < models_.size(); ++m) publish_model_name(m);
  // Last: a reader that sees the magic sees a table in this layout.
  models_page_->magic = shm::kStatusModelsMagic;
}

void Daemon::publish_model_name(std::size_t m) noexcept {
  const ModelPipeline& model = *models_[m];
  shm::StatusModel& out = models_page_->model[m];
  put_text(model.config().name, out.name);  // never another's: an id is its name's for good
  put_text(model.declared().version, out.version);
  put_text(model.backend_name(), out.backend);
  // Only grows, and only once the entry is written (a reload adds models at the end).
  if (m + 1 > models_page_->count.load(std::memory_order_relaxed)) {
    models_page_->count.store(static_cast<std::uint32_t>(m + 1), std::memory_order_release);
  }
}

namespace {

shm::StatusModelState model_state(ModelPipeline::Lifecycle lifecycle, unsigned lanes) noexcept {
  switch (lifecycle) {
    case ModelPipeline::Lifecycle::kUnloading: return shm::StatusModelState::kUnloading;
    case ModelPipeline::Lifecycle::kUnloaded: return shm::StatusModelState::kUnloaded;
    case ModelPipeline::Lifecycle::kLoading: return shm::StatusModelState::kLoading;
    case ModelPipeline::Lifecycle::kRemoved: return shm::StatusModelState::kAbsent;
    case ModelPipeline::Lifecycle::kLoaded: break;
  }
  return lanes > 0 ? shm::StatusModelState::kReady : shm::StatusModelState::kUnavailable;
}

}  // namespace

void Daemon::publish_models() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const std::int64_t now_ns = shm::monotonic_ns();
  for (std::size_t m = 0; m < models_.size(); ++m) {
    const ModelPipeline& model = *models_[m];
    shm::StatusModel& out = models_page_->model[m];
    const unsigned lanes = model.running() ? model.router().lane_view(now_ns).lanes : 0;
    out.lanes.store(lanes, relaxed);
    out.state.store(static_cast<std::uint32_t>(model_state(model.lifecycle(), lanes)), relaxed);
    const std::uint64_t taken = model.taken();
    out.requests_taken.store(taken, relaxed);
    const ModelCounters& counters = stats_.by_model[m];
    const std::uint64_t ok = counters.requests_ok.load(relaxed);
    const std::uint64_t failed = counters.requests_failed.load(relaxed);
    out.requests_ok.store(ok, relaxed);
    out.requests_failed.store(failed, relaxed);
    out.batches.store(counters.batches.load(relaxed), relaxed);
    out.inferences.store(counters.inferences.load(relaxed), relaxed);
    const std::uint64_t queue_ns = counters.queue_ns.load(relaxed);
    const std::uint64_t compute_ns = counters.compute_ns.load(relaxed);
    out.queue_ns.store(queue_ns, relaxed);
    out.compute_ns.store(compute_ns, relaxed);
    out.request_ns.store(queue_ns + compute_ns, relaxed);  // a request's time in the daemon is both
    // Taken, not answered and on no device: waiting for a batch. The counters are read apart, so
    // a reading may undercount; never below zero.
    std::uint64_t on_devices = 0;
    if (model.running()) {
      for (const auto& device : model.router().devices()) on_devices += device->outstanding_items.load(relaxed);
    }
    const std::uint64_t settled = ok + failed + on_devices;
    out.pending.store(taken > settled ? taken - settled : 0, relaxed);
  }
}

void Daemon::start_metrics_listener() {
  if (config_.metrics_listen.empty()) return;
  const ListenAddress address = parse_listen_address(config_.metrics_listen, "--metrics-listen").value();
  // The same reading and the same writer as a client's (batchd-http's /metrics): the two agree.
  metrics_ = std::make_unique<MetricsListener>(address, [this] {
    const DaemonStatus status = read_daemon_status(*status_, shm::kStatusFileBytes);
    std::string out;
    render_daemon_status(&status, out);
    return out;
  });
  metrics_->start();
  const std::size_t colon = config_.metrics_listen.rfind(':');
  spdlog::info("serving GET /metrics on {}:{}", config_.metrics_listen.substr(0, colon), metrics_->port());
}

void Daemon::publish_until_stopped() noexcept {
  std::unique_lock lock(publisher_mu_);
  while (!publisher_stop_) {
    publisher_cv_.wait_for(lock, publish_period_, [this] { return publisher_stop_; });
    if (publisher_stop_) return;
    lock.unlock();
    publish_status();
    lock.lock();
  }
}

void Daemon::stop_publisher() noexcept {
  if (!publisher_.joinable()) return;
  {
    std::lock_guard lock(publisher_mu_);
    publisher_stop_ = true;
  }
  publisher_cv_.notify_all();
  publisher_.join();
}

void Daemon::publish_status() noexcept {
  std::lock_guard lock(models_mu_);
  publish_status_locked();
}

void Daemon::publish_status_locked() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  shm::DaemonStatusPage& page = *status_;
  // The page's devices are the default model's (none while it is unloaded); each model's state
  // is in the models' table.
  const ModelPipeline& default_model = *models_.front();
  static const std::vector<std::unique_ptr<DeviceHealth>> kNoDevices;
  const Router* router = default_model.running() ? &default_model.router() : nullptr;
  const auto& devices = router != nullptr ? router->devices() : kNoDevices;
  const std::bitset<64> laggards = router != nullptr ? router->laggards(shm::monotonic_ns()) : std::bitset<64>{};
  std::uint32_t healthy = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const DeviceHealth& h = *devices[d];
    if (h.present() && (h.state() == DeviceState::kHealthy || h.state() == DeviceState::kProbing)) ++healthy;
    if (d >= shm::kStatusDevices) continue;
    shm::StatusDevice& out = page.device[d];
    out.state.store(h.present() ? static_cast<std::uint32_t>(h.state()) : shm::kStatusDeviceAbsent, relaxed);
    out.batches_ok.store(h.batches_ok(), relaxed);
    out.batches_failed.store(h.batches_failed(), relaxed);
    out.timeouts.store(h.timeouts(), relaxed);
    out.outstanding_requests.store(h.outstanding_items.load(relaxed), relaxed);
    // What was measured, however long ago: the routing estimate reads 0 once it is stale, and an
    // idle cpu device then showed a batch time of 0.
    out.batch_ns.store(h.measured_batch_ns(), relaxed);
    publish_memory(static_cast<unsigned>(d), out);
    page.laggard[d].store(laggards.test(d) ? 1 : 0, relaxed);
    page.probes[d].store(h.probes_ok(), relaxed);
  }
  page.devices.store(static_cast<std::uint32_t>(devices.size()), relaxed);
  page.healthy_devices.store(healthy, relaxed);
  page.clients.store(stats_.clients_attached.load(relaxed) - stats_.clients_detached.load(relaxed), relaxed);
  page.requests_taken.store(stats_.requests_taken.load(relaxed), relaxed);
  page.requests_ok.store(stats_.requests_ok.load(relaxed), relaxed);
  page.requests_failed.store(stats_.requests_failed.load(relaxed), relaxed);
  page.requests_rejected.store(stats_.requests_rejected.load(relaxed), relaxed);
  page.in_flight.store(stats_.in_flight(), relaxed);
  page.batches.store(stats_.batches.load(relaxed), relaxed);
  page.batch_failures.store(stats_.batch_failures.load(relaxed), relaxed);
  page.requests_abandoned.store(stats_.requests_abandoned.load(relaxed), relaxed);
  for (std::size_t b = 0; b < shm::kBatchSizeBuckets; ++b) {
    page.batch_sizes[b].store(stats_.batch_sizes[b].load(relaxed), relaxed);
  }
  for (std::size_t r = 0; r < shm::kFlushReasons; ++r) page.flushes[r].store(stats_.flushes[r].load(relaxed), relaxed);
  page.arrivals_per_s.store(stats_.arrivals_per_s.load(relaxed), relaxed);
  page.target_batch.store(stats_.target_batch.load(relaxed), relaxed);
  for (std::size_t d = 0; d < std::min(devices.size(), shm::kStatusDevices); ++d) {
    // Until it is trusted the policy uses the prior ("no cost"), so that is what is shown.
    CostFit fit = router->cost_fit(static_cast<unsigned>(d));
    if (!fit.fitted) fit.fixed_ns = fit.per_item_ns = fit.per_byte_ns = 0;
    shm::StatusCost& out = page.cost[d];
    out.fixed_ns.store(static_cast<std::uint64_t>(fit.fixed_ns), relaxed);
    out.per_item_ps.store(static_cast<std::uint64_t>(fit.per_item_ns * 1000), relaxed);
    out.per_byte_ps.store(static_cast<std::uint64_t>(fit.per_byte_ns * 1000), relaxed);
    out.samples.store(fit.samples, relaxed);
  }
  for (std::size_t c = 0; c < shm::kWirePriorities; ++c) {
    page.requests_taken_by_class[c].store(stats_.requests_taken_by_class[c].load(relaxed), relaxed);
    page.requests_shed_by_class[c].store(stats_.requests_shed_by_class[c].load(relaxed), relaxed);
    page.arrivals_per_s_by_class[c].store(stats_.arrivals_per_s_by_class[c].load(relaxed), relaxed);
  }
  page.dead_letters.store(dead_letters_->recorded(), relaxed);
  page.dead_letters_dropped.store(dead_letters_->dropped(), relaxed);
  page.priority_downgrades.store(stats_.priority_downgrades.load(relaxed), relaxed);
  page.connections_shed.store(stats_.connections_shed.load(relaxed), relaxed);
  publish_latency();
  publish_workers();
  publish_models();
  page.published_ns.store(shm::monotonic_ns(), std::memory_order_release);
}

void Daemon::publish_workers() noexcept {
  if (workers_models_.empty()) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  // What readiness needs: the loaded workers models' minimums (an unloaded one needs none).
  unsigned min_workers = 0;
  for (const ModelPipeline* model : workers_models_) {
    if (model->lifecycle() == ModelPipeline::Lifecycle::kLoaded) min_workers += model->config().settings.workers.min_workers;
  }
  status_->min_workers.store(min_workers, relaxed);
  std::array<bool, shm::kStatusDevices> held{};
  unsigned attached = 0;
  for (ModelPipeline* model : workers_models_) {
    if (model->workers() == nullptr) continue;  // unloaded
    WorkerBackend& workers = *model->workers();
    attached += workers.attached();
    for (unsigned d = 0; d < workers.devices(); ++d) {
      const std::shared_ptr<WorkerLink> link = workers.at(d);
      if (link == nullptr || link->who().place >= shm::kStatusDevices) continue;
      const unsigned place = link->who().place;
      shm::StatusWorker& out = workers_page_->worker[place];
      held[place] = true;
      out.model.store(model->id(), relaxed);
      out.device.store(d, relaxed);
      out.lanes.store(link->buffers(), relaxed);
      out.batches.store(link->batches(), relaxed);
      put_text(link->who().name, out.name);
      put_text(link->who().version, out.version);
      out.pid.store(static_cast<std::uint32_t>(link->who().pid), relaxed);
    }
  }
  for (std::size_t place = 0; place < shm::kStatusDevices; ++place) {
    if (!held[place]) workers_page_->worker[place].pid.store(0, relaxed);
    publish_histogram(stats_.latency.handoff_by_device[place], workers_page_->worker[place].handoff);
  }
  status_->workers.store(attached, relaxed);
}

void Daemon::publish_latency() noexcept {
  for (std::size_t c = 0; c < shm::kWirePriorities; ++c) {
    publish_histogram(stats_.latency.queue_by_class[c], latency_->queue_by_class[c]);
  }
  for (std::size_t d = 0; d < shm::kStatusDevices; ++d) {
    publish_histogram(stats_.latency.compute_by_device[d], latency_->compute_by_device[d]);
  }
}

void Daemon::publish_memory(unsigned device, shm::StatusDevice& out) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const Router::MemoryView memory = models_.front()->router().device_memory(device);
  // The batch policy's own limit bounds the budget too (a reload changes it; the page has it).
  const std::uint64_t budget = std::min(memory.byte_budget, status_->max_batch_bytes.load(relaxed));
  out.byte_budget.store(static_cast<std::uint32_t>(std::min<std::uint64_t>(budget, UINT32_MAX)), relaxed);
  out.memory_free_bytes.store(memory.reading.free_bytes, relaxed);
  out.memory_total_bytes.store(memory.reading.total_bytes, relaxed);
}

void Daemon::publish_policy() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const BatchLimits& batch = models_.front()->limits();
  status_->max_batch.store(static_cast<std::uint32_t>(batch.max_batch), relaxed);
  status_->policy.store(static_cast<std::uint32_t>(batch.policy), relaxed);
  status_->max_wait_ns.store(batch.max_wait.count(), relaxed);
  status_->max_batch_bytes.store(batch.max_batch_bytes, relaxed);
}

void Daemon::update_limits(const BatchLimits& limits) { update_limits(kDefaultModelName, limits); }

ModelPipeline* Daemon::model_named(std::string_view name) const noexcept {
  const auto it = std::find_if(models_.begin(), models_.end(), [&](const auto& m) {
    return m->config().name == name && m->lifecycle() != ModelPipeline::Lifecycle::kRemoved;
  });
  return it != models_.end() ? it->get() : nullptr;
}

bool Daemon::update_limits(const std::string& model, const BatchLimits& limits) {
  std::unique_lock lock(models_mu_);  // a reload on the drain thread may be adding a model
  ModelPipeline* named = model_named(model);
  lock.unlock();
  if (named == nullptr) return false;
  named->update_limits(limits);
  limits_changed_.store(true, std::memory_order_release);
  ring_doorbell();
  return true;
}

void Daemon::apply_pending_limits() {
  if (!limits_changed_.exchange(false, std::memory_order_acq_rel)) return;
  for (auto& model : models_) {
    if (model->apply_pending_limits() && model->id() == 0) publish_policy();
  }
}

void Daemon::set_watchdog(std::chrono::nanoseconds interval, std::function<void()> ping) {
  watchdog_interval_ns_ = std::max<std::int64_t>(interval.count(), 1'000'000);
  watchdog_ping_ = std::move(ping);
}

void Daemon::ping_watchdog_if_due(std::int64_t now_ns) {
  if (watchdog_interval_ns_ == 0 || now_ns < next_watchdog_ns_) return;
  watchdog_ping_();
  next_watchdog_ns_ = now_ns + watchdog_interval_ns_;
}

void Daemon::run() {
  std::int64_t idle_since_ns = 0;
  bool spinning = false;
  const std::int64_t spin_ns = static_cast<std::int64_t>(config_.drain_spin_us) * 1000;
  for (;;) {
    handshakes_.new_pass();
    handle_completions();
    if (listen_deferred_ && !stop_requested_.load(std::memory_order_relaxed)) accept_clients();
    read_due_hellos();
    apply_reload();
    apply_pending_limits();
    const std::int64_t now_ns = shm::monotonic_ns();
    advance_model_changes(now_ns);
    ping_watchdog_if_due(now_ns);
    expire_attaches(now_ns);
    const bool drained = drain_rings(now_ns);
    const bool progressed = fill_batches(now_ns) || drained;
    for (auto& model : models_) model->refresh_policy_stats(now_ns);

    if (stop_requested_.load(std::memory_order_relaxed) && stopping_done(now_ns, progressed)) break;
    if (all_devices_lost()) {
      finish_lost();
      return;
    }
    if (progressed) {
      if (spinning) drain_spin_.note(true);
      spinning = false;
      idle_since_ns = 0;
      continue;
    }
    if (idle_since_ns == 0) {
      idle_since_ns = now_ns;
      spinning = spin_ns > 0 && drain_spin_.pays();
    }
    if (spinning && now_ns - idle_since_ns < spin_ns) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (spinning) drain_spin_.note(false);
    spinning = false;
    sleep_until_work();
    idle_since_ns = 0;
  }
  finish_stop();
}

}  // namespace batchd

#include "daemon/status_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bitset>
#include <cstdio>
#include <cstring>

#include "shm/clock.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {

namespace {

void publish_histogram(const LatencyHistogram& from, shm::StatusHistogram& to) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  for (std::size_t b = 0; b < shm::kLatencyBuckets; ++b) to.buckets[b].store(from.buckets[b].load(relaxed), relaxed);
  to.sum_ns.store(from.sum_ns.load(relaxed), relaxed);
}

// Where one device's figures go: the page's columns for the default model's devices, a row of
// the models' device table for each model's.
struct DeviceOut {
  shm::StatusDevice& device;
  shm::StatusCost& cost;
  std::atomic<std::uint32_t>& laggard;
  std::atomic<std::uint64_t>& probes;
};

// A router's devices into the status file (the first shm::kStatusDevices of them); returns how
// many are healthy or being probed, of all. `max_batch_bytes`, the model's policy's limit, bounds
// the byte budgets shown.
template <typename OutAt>
std::uint32_t publish_devices(const Router& router, std::uint64_t max_batch_bytes, OutAt out_at) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const auto& devices = router.devices();
  const std::bitset<64> laggards = router.laggards(shm::monotonic_ns());
  std::uint32_t healthy = 0;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const DeviceHealth& h = *devices[d];
    if (h.present() && (h.state() == DeviceState::kHealthy || h.state() == DeviceState::kProbing)) ++healthy;
    if (d >= shm::kStatusDevices) continue;
    const DeviceOut out = out_at(d);
    out.device.state.store(h.present() ? static_cast<std::uint32_t>(h.state()) : shm::kStatusDeviceAbsent, relaxed);
    out.device.batches_ok.store(h.batches_ok(), relaxed);
    out.device.batches_failed.store(h.batches_failed(), relaxed);
    out.device.timeouts.store(h.timeouts(), relaxed);
    out.device.outstanding_requests.store(h.outstanding_items.load(relaxed), relaxed);
    // What was measured, however long ago: the routing estimate reads 0 once it is stale, and an
    // idle cpu device then showed a batch time of 0.
    out.device.batch_ns.store(h.measured_batch_ns(), relaxed);
    const Router::MemoryView memory = router.device_memory(static_cast<unsigned>(d));
    const std::uint64_t budget = std::min(memory.byte_budget, max_batch_bytes);
    out.device.byte_budget.store(static_cast<std::uint32_t>(std::min<std::uint64_t>(budget, UINT32_MAX)), relaxed);
    out.device.memory_free_bytes.store(memory.reading.free_bytes, relaxed);
    out.device.memory_total_bytes.store(memory.reading.total_bytes, relaxed);
    out.laggard.store(laggards.test(d) ? 1 : 0, relaxed);
    out.probes.store(h.probes_ok(), relaxed);
    // Until it is trusted the policy uses the prior ("no cost"), so that is what is shown.
    CostFit fit = router.cost_fit(static_cast<unsigned>(d));
    if (!fit.fitted) fit.fixed_ns = fit.per_item_ns = fit.per_byte_ns = 0;
    out.cost.fixed_ns.store(static_cast<std::uint64_t>(fit.fixed_ns), relaxed);
    out.cost.per_item_ps.store(static_cast<std::uint64_t>(fit.per_item_ns * 1000), relaxed);
    out.cost.per_byte_ps.store(static_cast<std::uint64_t>(fit.per_byte_ns * 1000), relaxed);
    out.cost.samples.store(fit.samples, relaxed);
  }
  return healthy;
}

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

}  // namespace

StatusWriter::StatusWriter(const DaemonStats& stats, const std::vector<std::unique_ptr<ModelPipeline>>& models,
                           std::mutex& models_mu) noexcept
    : stats_(stats), models_(models), models_mu_(models_mu) {}

StatusWriter::~StatusWriter() { stop(); }

void StatusWriter::create(const DeadLetterLog& dead_letters, const ResponseCaches& caches) {
  dead_letters_ = &dead_letters;
  caches_ = &caches;
  // Start-up: a failure here is the operator's to see, so value() throws it.
  fd_ = shm::create_memfd("batchd-status", shm::kStatusFileBytes).value();
  map_ = shm::map_fd(fd_.get(), shm::kStatusFileBytes, true).value();
  shm::seal_memfd(fd_.get(), true).value();
  char* base = static_cast<char*>(map_.get_address());
  page_ = new (base) shm::DaemonStatusPage{};
  page_->magic = shm::kStatusMagic;
  latency_ = new (base + shm::kStatusLatencyOffset) shm::StatusLatency{};
  latency_->magic = shm::kStatusLatencyMagic;
  latency_->version = shm::kStatusLatencyVersion;
  latency_->buckets = shm::kLatencyBuckets;
  latency_->classes = shm::kWirePriorities;
  latency_->devices = shm::kStatusDevices;
  workers_ = new (base + shm::kStatusWorkersOffset) shm::StatusWorkers{};
  workers_->magic = shm::kStatusWorkersMagic;
  workers_->version = shm::kStatusWorkersVersion;
  workers_->places = shm::kStatusDevices;
  models_page_ = new (base + shm::kStatusModelsOffset) shm::StatusModels{};
  models_page_->version = shm::kStatusModelsVersion;
  models_page_->capacity = shm::kStatusModels;
  model_batches_ = new (base + shm::kStatusModelBatchesOffset) shm::StatusModelBatches{};
  model_batches_->magic = shm::kStatusModelBatchesMagic;
  model_batches_->version = shm::kStatusModelBatchesVersion;
  model_batches_->capacity = shm::kStatusModels;
  model_devices_ = new (base + shm::kStatusModelDevicesOffset) shm::StatusModelDevices{};
  model_devices_->magic = shm::kStatusModelDevicesMagic;
  model_devices_->version = shm::kStatusModelDevicesVersion;
  model_devices_->capacity = shm::kStatusModels;
  model_devices_->places = shm::kStatusDevices;
  model_policies_ = new (base + shm::kStatusModelPoliciesOffset) shm::StatusModelPolicies{};
  model_policies_->magic = shm::kStatusModelPoliciesMagic;
  model_policies_->version = shm::kStatusModelPoliciesVersion;
  model_policies_->capacity = shm::kStatusModels;
  model_latency_ = new (base + shm::kStatusModelLatencyOffset) shm::StatusModelLatency{};
  model_latency_->magic = shm::kStatusModelLatencyMagic;
  model_latency_->version = shm::kStatusModelLatencyVersion;
  model_latency_->capacity = shm::kStatusModels;
  model_latency_->buckets = shm::kLatencyBuckets;
  model_latency_->classes = shm::kWirePriorities;
  cache_ = new (base + shm::kStatusCacheOffset) shm::StatusCache{};
  cache_->magic = shm::kStatusCacheMagic;
  cache_->version = shm::kStatusCacheVersion;
  cache_->capacity = shm::kStatusModels;
  cache_->segment_bytes.store(caches.segment_bytes(), std::memory_order_relaxed);
  page_->daemon_pid = static_cast<std::uint32_t>(::getpid());
  // Daemon-wide, each workers model's minimum counts: a model's own readiness is its state in
  // the models table.
  unsigned min_workers = 0;
  for (const auto& model : models_) {
    if (model->by_workers()) min_workers += model->config().settings.workers.min_workers;
  }
  page_->min_workers.store(min_workers, std::memory_order_relaxed);
  const std::string_view backend = models_.front()->backend_name();
  std::snprintf(page_->backend, sizeof(page_->backend), "%.*s", static_cast<int>(backend.size()), backend.data());
}

void StatusWriter::publish_model_names() noexcept {
  for (std::size_t m = 0; m < models_.size(); ++m) publish_model_name(m);
  // Last: a reader that sees the magic sees a table in this layout.
  models_page_->magic = shm::kStatusModelsMagic;
}

void StatusWriter::publish_model_name(std::size_t id) noexcept {
  const ModelPipeline& model = *models_[id];
  shm::StatusModel& out = models_page_->model[id];
  put_text(model.config().name, out.name);  // never another's: an id is its name's for good
  put_text(model.declared().version, out.version);
  put_text(model.backend_name(), out.backend);
  // Only grows, and only once the entry is written (a reload adds models at the end).
  if (id + 1 > models_page_->count.load(std::memory_order_relaxed)) {
    models_page_->count.store(static_cast<std::uint32_t>(id + 1), std::memory_order_release);
  }
}

namespace {

shm::StatusModelState model_state(ModelPipeline::Lifecycle lifecycle, unsigned lanes, bool warming) noexcept {
  switch (lifecycle) {
    case ModelPipeline::Lifecycle::kUnloading: return shm::StatusModelState::kUnloading;
    case ModelPipeline::Lifecycle::kUnloaded: return shm::StatusModelState::kUnloaded;
    case ModelPipeline::Lifecycle::kLoading: return shm::StatusModelState::kLoading;
    case ModelPipeline::Lifecycle::kRemoved: return shm::StatusModelState::kAbsent;
    case ModelPipeline::Lifecycle::kLoaded: break;
  }
  if (lanes > 0) return shm::StatusModelState::kReady;
  return warming ? shm::StatusModelState::kWarming : shm::StatusModelState::kUnavailable;
}

}  // namespace

void StatusWriter::publish_models() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const std::int64_t now_ns = shm::monotonic_ns();
  for (std::size_t m = 0; m < models_.size(); ++m) {
    const ModelPipeline& model = *models_[m];
    shm::StatusModel& out = models_page_->model[m];
    const unsigned lanes = model.running() ? model.router().lane_view(now_ns).lanes : 0;
    out.lanes.store(lanes, relaxed);
    const bool warming = model.running() && model.router().warming();
    out.state.store(static_cast<std::uint32_t>(model_state(model.lifecycle(), lanes, warming)), relaxed);
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
    shm::StatusModelBatch& batches = model_batches_->model[m];
    for (std::size_t r = 0; r < shm::kFlushReasons; ++r) batches.flushes[r].store(counters.flushes[r].load(relaxed), relaxed);
    for (std::size_t b = 0; b < shm::kBatchSizeBuckets; ++b) {
      batches.batch_sizes[b].store(counters.batch_sizes[b].load(relaxed), relaxed);
    }
    // Taken, not answered and on no device: waiting for a batch. The counters are read apart, so
    // a reading may undercount; never below zero.
    std::uint64_t on_devices = 0;
    if (model.running()) {
      for (const auto& device : model.router().devices()) on_devices += device->outstanding_items.load(relaxed);
    }
    const std::uint64_t settled = ok + failed + on_devices;
    out.pending.store(taken > settled ? taken - settled : 0, relaxed);
    for (std::size_t c = 0; c < shm::kWirePriorities; ++c) {
      publish_histogram(counters.queue_by_class[c], model_latency_->model[m].queue_by_class[c]);
    }
    shm::StatusModelPolicy& policy = model_policies_->model[m];
    policy.arrivals_per_s.store(counters.arrivals_per_s.load(relaxed), relaxed);
    policy.target_batch.store(counters.target_batch.load(relaxed), relaxed);
    shm::StatusModelDeviceTable& table = model_devices_->model[m];
    std::uint32_t devices = 0;
    std::uint32_t healthy = 0;
    if (model.running()) {
      devices = static_cast<std::uint32_t>(model.router().devices().size());
      // Its limits are the drain thread's: their published copy bounds the budgets shown.
      healthy = publish_devices(model.router(), policy.max_batch_bytes.load(relaxed), [&](std::size_t d) {
        shm::StatusModelDevice& row = table.device[d];
        return DeviceOut{row.device, row.cost, row.laggard, row.probes};
      });
    }
    table.devices.store(devices, relaxed);
    table.healthy.store(healthy, relaxed);
    table.shares_devices.store(model.running() && model.router().shares_devices() ? 1 : 0, relaxed);
    table.turns_waited.store(counters.turns_waited.load(relaxed), relaxed);
    table.turn_wait_ns.store(counters.turn_wait_ns.load(relaxed), relaxed);
  }
}

void StatusWriter::publish_caches() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  shm::CacheCounts counts;
  try {
    counts = caches_->counts();
  } catch (const std::exception&) {
    return;  // a lock that failed: the next period shows them
  }
  cache_->entries.store(counts.entries, relaxed);
  cache_->bytes.store(counts.bytes, relaxed);
  cache_->inserts.store(counts.inserts, relaxed);
  cache_->evictions.store(counts.evictions, relaxed);
  for (std::size_t m = 0; m < models_.size(); ++m) {
    const ModelCounters& counters = stats_.by_model[m];
    shm::StatusModelCache& out = cache_->model[m];
    out.enabled.store(caches_->cached(static_cast<std::uint32_t>(m)) ? 1 : 0, relaxed);
    out.hits.store(counters.cache_hits.load(relaxed), relaxed);
    out.hit_ns.store(counters.cache_hit_ns.load(relaxed), relaxed);
    out.misses.store(counters.cache_misses.load(relaxed), relaxed);
    out.miss_ns.store(counters.cache_miss_ns.load(relaxed), relaxed);
    out.coalesced.store(counters.coalesced.load(relaxed), relaxed);
  }
}

void StatusWriter::publish_until_stopped() noexcept {
  std::unique_lock lock(publisher_mu_);
  while (!publisher_stop_) {
    publisher_cv_.wait_for(lock, period_, [this] { return publisher_stop_; });
    if (publisher_stop_) return;
    lock.unlock();
    publish();
    lock.lock();
  }
}

void StatusWriter::start_publishing(std::chrono::milliseconds period) {
  period_ = period;
  publisher_ = std::thread([this] { publish_until_stopped(); });
}

void StatusWriter::stop() noexcept {
  if (!publisher_.joinable()) return;
  {
    std::lock_guard lock(publisher_mu_);
    publisher_stop_ = true;
  }
  publisher_cv_.notify_all();
  publisher_.join();
}

void StatusWriter::publish() noexcept {
  std::lock_guard lock(models_mu_);
  publish_locked();
  publish_caches();
}

void StatusWriter::publish_locked() noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  shm::DaemonStatusPage& page = *page_;
  // The page's devices are the default model's (none while it is unloaded); each model's are in
  // the models' device table.
  const ModelPipeline& default_model = *models_.front();
  std::uint32_t devices = 0;
  std::uint32_t healthy = 0;
  if (default_model.running()) {
    devices = static_cast<std::uint32_t>(default_model.router().devices().size());
    // The batch policy's own limit bounds the budget too (a reload changes it; the page has it).
    healthy = publish_devices(default_model.router(), page.max_batch_bytes.load(relaxed), [&](std::size_t d) {
      return DeviceOut{page.device[d], page.cost[d], page.laggard[d], page.probes[d]};
    });
  }
  page.devices.store(devices, relaxed);
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

void StatusWriter::publish_workers() noexcept {
  if (std::none_of(models_.begin(), models_.end(), [](const auto& m) { return m->by_workers(); })) return;
  constexpr auto relaxed = std::memory_order_relaxed;
  // What readiness needs: the loaded workers models' minimums (an unloaded one needs none).
  unsigned min_workers = 0;
  for (const auto& model : models_) {
    if (model->by_workers() && model->lifecycle() == ModelPipeline::Lifecycle::kLoaded) {
      min_workers += model->config().settings.workers.min_workers;
    }
  }
  page_->min_workers.store(min_workers, relaxed);
  std::array<bool, shm::kStatusDevices> held{};
  unsigned attached = 0;
  for (const auto& model : models_) {
    if (!model->by_workers() || model->workers() == nullptr) continue;  // in process, or unloaded
    WorkerBackend& workers = *model->workers();
    attached += workers.attached();
    for (unsigned d = 0; d < workers.devices(); ++d) {
      const std::shared_ptr<WorkerLink> link = workers.at(d);
      if (link == nullptr || link->who().place >= shm::kStatusDevices) continue;
      const unsigned place = link->who().place;
      shm::StatusWorker& out = workers_->worker[place];
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
    if (!held[place]) workers_->worker[place].pid.store(0, relaxed);
    publish_histogram(stats_.latency.handoff_by_device[place], workers_->worker[place].handoff);
  }
  page_->workers.store(attached, relaxed);
}

void StatusWriter::publish_latency() noexcept {
  for (std::size_t c = 0; c < shm::kWirePriorities; ++c) {
    publish_histogram(stats_.latency.queue_by_class[c], latency_->queue_by_class[c]);
  }
  for (std::size_t d = 0; d < shm::kStatusDevices; ++d) {
    publish_histogram(stats_.latency.compute_by_device[d], latency_->compute_by_device[d]);
  }
}

void StatusWriter::publish_policy(const ModelPipeline& model) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  const BatchLimits& batch = model.limits();
  shm::StatusModelPolicy& row = model_policies_->model[model.id()];
  row.policy.store(static_cast<std::uint32_t>(batch.policy), relaxed);
  row.max_batch.store(static_cast<std::uint32_t>(batch.max_batch), relaxed);
  row.max_wait_ns.store(batch.max_wait.count(), relaxed);
  row.max_batch_bytes.store(batch.max_batch_bytes, relaxed);
  if (model.id() != 0) return;
  page_->max_batch.store(static_cast<std::uint32_t>(batch.max_batch), relaxed);
  page_->policy.store(static_cast<std::uint32_t>(batch.policy), relaxed);
  page_->max_wait_ns.store(batch.max_wait.count(), relaxed);
  page_->max_batch_bytes.store(batch.max_batch_bytes, relaxed);
}

}  // namespace batchd

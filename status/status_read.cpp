#include "status/status_read.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "shm/clock.hpp"

namespace batchd {

namespace {

// A wire class's index in a snapshot's arrays (kStatusClasses: high, normal, low): its rank.
std::size_t class_index(std::uint32_t wire) noexcept { return shm::rank_of(static_cast<shm::WirePriority>(wire)); }

// Text the daemon wrote as NUL-padded words (shm/status_page.hpp).
template <std::size_t N>
std::string read_words(const std::atomic<std::uint64_t> (&words)[N]) {
  char text[N * 8 + 1] = {};
  for (std::size_t w = 0; w < N; ++w) {
    const std::uint64_t word = words[w].load(std::memory_order_relaxed);
    std::memcpy(text + w * 8, &word, 8);
  }
  return text;
}

// The section of type Section at `offset` of the status file, or nullptr when the file is too
// short to hold it (a daemon from before it); its header is the caller's to check.
template <typename Section>
const Section* section_at(const shm::DaemonStatusPage& page, std::size_t file_bytes, std::size_t offset) {
  if (file_bytes < offset + sizeof(Section)) return nullptr;
  return reinterpret_cast<const Section*>(reinterpret_cast<const char*>(&page) + offset);
}

// The histograms after the page, or nullptr when this daemon publishes none (its file is one page)
// or their header is not this build's: the numbers would mean something else.
const shm::StatusLatency* latency_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* latency = section_at<shm::StatusLatency>(page, file_bytes, shm::kStatusLatencyOffset);
  if (latency == nullptr) return nullptr;
  const bool ours = latency->magic == shm::kStatusLatencyMagic &&
                    latency->version == shm::kStatusLatencyVersion &&
                    latency->buckets == shm::kLatencyBuckets && latency->classes == shm::kWirePriorities &&
                    latency->devices == shm::kStatusDevices;
  return ours ? latency : nullptr;
}

DaemonStatus::Histogram read_histogram(const shm::StatusHistogram& in) {
  DaemonStatus::Histogram out;
  out.buckets.reserve(shm::kLatencyBuckets);
  for (const auto& bucket : in.buckets) out.buckets.push_back(bucket.load(std::memory_order_relaxed));
  out.sum_ns = in.sum_ns.load(std::memory_order_relaxed);
  return out;
}

void read_latency(const shm::StatusLatency& in, DaemonStatus& out) {
  out.latency_bounds_ns.assign(std::begin(shm::kLatencyBoundsNs), std::end(shm::kLatencyBoundsNs));
  for (std::uint32_t wire = 0; wire < shm::kWirePriorities; ++wire) {
    out.queue_time_by_class[class_index(wire)] = read_histogram(in.queue_by_class[wire]);
  }
  // out.devices holds at most kStatusDevices entries (the listed ones).
  for (std::size_t d = 0; d < out.devices.size(); ++d) {
    out.devices[d].compute_time = read_histogram(in.compute_by_device[d]);
  }
}

// Who each device of a workers daemon is, or nullptr when the daemon publishes none.
const shm::StatusWorkers* workers_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* workers = section_at<shm::StatusWorkers>(page, file_bytes, shm::kStatusWorkersOffset);
  if (workers == nullptr) return nullptr;
  const bool ours = workers->magic == shm::kStatusWorkersMagic && workers->version == shm::kStatusWorkersVersion &&
                    workers->places == shm::kStatusDevices;
  return ours ? workers : nullptr;
}

// After the models: a worker's model is named from that table.
void read_workers(const shm::StatusWorkers& in, DaemonStatus& out) {
  constexpr auto relaxed = std::memory_order_relaxed;
  const bool default_on_workers = (out.models.empty() ? out.backend : out.models.front().backend) == "workers";
  for (std::uint32_t place = 0; place < shm::kStatusDevices; ++place) {
    const shm::StatusWorker& page = in.worker[place];
    DaemonStatus::Worker worker;
    worker.place = place;
    worker.handoff = read_histogram(page.handoff);
    worker.pid = page.pid.load(relaxed);
    const std::uint32_t model = page.model.load(relaxed);
    worker.device = page.device.load(relaxed);
    // Where the default model runs on workers, its devices carry their worker, as before other
    // models could.
    const bool default_device = default_on_workers && model == 0 && worker.device == place && place < out.devices.size();
    if (default_on_workers && place < out.devices.size()) out.devices[place].worker_handoff = worker.handoff;
    if (worker.pid == 0) continue;
    worker.model = model < out.models.size() ? out.models[model].name : std::to_string(model);
    worker.lanes = page.lanes.load(relaxed);
    worker.batches = page.batches.load(relaxed);
    worker.name = read_words(page.name);
    worker.version = read_words(page.version);
    if (default_device) {
      DaemonStatus::Device& device = out.devices[place];
      device.worker_pid = worker.pid;
      device.worker_lanes = worker.lanes;
      device.worker_batches = worker.batches;
      device.worker_name = worker.name;
      device.worker_version = worker.version;
    }
    out.attached_workers.push_back(std::move(worker));
  }
}

// The models the daemon serves, or nullptr when it publishes no table (one from before models).
const shm::StatusModels* models_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* models = section_at<shm::StatusModels>(page, file_bytes, shm::kStatusModelsOffset);
  if (models == nullptr) return nullptr;
  const bool ours = models->magic == shm::kStatusModelsMagic && models->version == shm::kStatusModelsVersion &&
                    models->capacity == shm::kStatusModels;
  return ours ? models : nullptr;
}

// Each model's batch counts, or nullptr when the daemon publishes none (one from before them).
const shm::StatusModelBatches* model_batches_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* batches = section_at<shm::StatusModelBatches>(page, file_bytes, shm::kStatusModelBatchesOffset);
  if (batches == nullptr) return nullptr;
  const bool ours = batches->magic == shm::kStatusModelBatchesMagic &&
                    batches->version == shm::kStatusModelBatchesVersion && batches->capacity == shm::kStatusModels;
  return ours ? batches : nullptr;
}

// Each model's devices, or nullptr when the daemon publishes none (one from before them).
const shm::StatusModelDevices* model_devices_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* devices = section_at<shm::StatusModelDevices>(page, file_bytes, shm::kStatusModelDevicesOffset);
  if (devices == nullptr) return nullptr;
  const bool ours = devices->magic == shm::kStatusModelDevicesMagic &&
                    (devices->version == 1 || devices->version == shm::kStatusModelDevicesVersion) &&
                    devices->capacity == shm::kStatusModels && devices->places == shm::kStatusDevices;
  return ours ? devices : nullptr;
}

// One device's row, the page's or a model's table's; `max_batch_bytes` stands for the byte budget
// of a daemon from before memory feedback, which left the field 0 and held nothing back.
DaemonStatus::Device read_device(const shm::StatusDevice& dev, const shm::StatusCost& cost,
                                 const std::atomic<std::uint32_t>& laggard, const std::atomic<std::uint64_t>& probes,
                                 std::uint64_t max_batch_bytes) {
  static constexpr const char* kStates[] = {"healthy", "unhealthy", "probing", "lost", "absent"};
  constexpr auto relaxed = std::memory_order_relaxed;
  DaemonStatus::Device out;
  const std::uint32_t state = dev.state.load(relaxed);
  out.state = state < std::size(kStates) ? kStates[state] : "unknown";
  out.batches_ok = dev.batches_ok.load(relaxed);
  out.batches_failed = dev.batches_failed.load(relaxed);
  out.timeouts = dev.timeouts.load(relaxed);
  out.outstanding_requests = dev.outstanding_requests.load(relaxed);
  out.batch_ns = dev.batch_ns.load(relaxed);
  out.fixed_ns = static_cast<double>(cost.fixed_ns.load(relaxed));
  out.per_item_ns = static_cast<double>(cost.per_item_ps.load(relaxed)) / 1000;
  out.per_byte_ns = static_cast<double>(cost.per_byte_ps.load(relaxed)) / 1000;
  out.cost_samples = cost.samples.load(relaxed);
  out.memory_free_bytes = dev.memory_free_bytes.load(relaxed);
  out.memory_total_bytes = dev.memory_total_bytes.load(relaxed);
  out.byte_budget = dev.byte_budget.load(relaxed);
  out.laggard = laggard.load(relaxed) != 0;
  out.probes = probes.load(relaxed);
  if (out.byte_budget == 0 && out.memory_total_bytes == 0) out.byte_budget = max_batch_bytes;
  return out;
}

// out.models and out.devices (the page's: the default model's, with their compute times) are
// read already.
void read_model_devices(const shm::StatusModelDevices& in, DaemonStatus& out) {
  out.devices_by_model = true;
  // out.models holds at most kStatusModels entries (model_count).
  for (std::size_t m = 0; m < out.models.size(); ++m) {
    const shm::StatusModelDeviceTable& table = in.model[m];
    DaemonStatus::Model& model = out.models[m];
    model.healthy_devices = table.healthy.load(std::memory_order_relaxed);
    if (in.version >= 2) {
      model.shares_devices = table.shares_devices.load(std::memory_order_relaxed) != 0;
      model.turns_waited = table.turns_waited.load(std::memory_order_relaxed);
      model.turn_wait_ns = table.turn_wait_ns.load(std::memory_order_relaxed);
    }
    const std::size_t listed = std::min<std::size_t>(table.devices.load(std::memory_order_relaxed), shm::kStatusDevices);
    for (std::size_t d = 0; d < listed; ++d) {
      const shm::StatusModelDevice& row = table.device[d];
      model.devices.push_back(read_device(row.device, row.cost, row.laggard, row.probes, out.max_batch_bytes));
      if (m == 0 && d < out.devices.size()) model.devices.back().compute_time = out.devices[d].compute_time;
    }
  }
}

// Each model's policy, or nullptr when the daemon publishes none (one from before them).
const shm::StatusModelPolicies* model_policies_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* policies = section_at<shm::StatusModelPolicies>(page, file_bytes, shm::kStatusModelPoliciesOffset);
  if (policies == nullptr) return nullptr;
  const bool ours = policies->magic == shm::kStatusModelPoliciesMagic &&
                    policies->version == shm::kStatusModelPoliciesVersion && policies->capacity == shm::kStatusModels;
  return ours ? policies : nullptr;
}

const char* policy_name(std::uint32_t policy) noexcept { return policy == 1 ? "adaptive" : "fixed"; }

void read_model_policies(const shm::StatusModelPolicies& in, DaemonStatus& out) {
  constexpr auto relaxed = std::memory_order_relaxed;
  out.policies_by_model = true;
  // out.models holds at most kStatusModels entries (model_count).
  for (std::size_t m = 0; m < out.models.size(); ++m) {
    const shm::StatusModelPolicy& row = in.model[m];
    DaemonStatus::Model& model = out.models[m];
    model.policy = policy_name(row.policy.load(relaxed));
    model.max_batch = row.max_batch.load(relaxed);
    model.max_wait_ns = row.max_wait_ns.load(relaxed);
    model.max_batch_bytes = row.max_batch_bytes.load(relaxed);
    model.arrivals_per_s = row.arrivals_per_s.load(relaxed);
    model.target_batch = row.target_batch.load(relaxed);
  }
}

// Each model's queue times, or nullptr when the daemon publishes none (one from before them) or
// their header is not this build's.
const shm::StatusModelLatency* model_latency_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* latency = section_at<shm::StatusModelLatency>(page, file_bytes, shm::kStatusModelLatencyOffset);
  if (latency == nullptr) return nullptr;
  const bool ours = latency->magic == shm::kStatusModelLatencyMagic &&
                    latency->version == shm::kStatusModelLatencyVersion && latency->capacity == shm::kStatusModels &&
                    latency->buckets == shm::kLatencyBuckets && latency->classes == shm::kWirePriorities;
  return ours ? latency : nullptr;
}

void read_model_latency(const shm::StatusModelLatency& in, DaemonStatus& out) {
  out.queue_times_by_model = true;
  // out.models holds at most kStatusModels entries (model_count).
  for (std::size_t m = 0; m < out.models.size(); ++m) {
    for (std::uint32_t wire = 0; wire < shm::kWirePriorities; ++wire) {
      out.models[m].queue_time_by_class[class_index(wire)] = read_histogram(in.model[m].queue_by_class[wire]);
    }
  }
}

// The caches' section, or nullptr when the daemon publishes none (one from before them).
const shm::StatusCache* cache_section(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const auto* cache = section_at<shm::StatusCache>(page, file_bytes, shm::kStatusCacheOffset);
  if (cache == nullptr) return nullptr;
  const bool ours = cache->magic == shm::kStatusCacheMagic && cache->version == shm::kStatusCacheVersion &&
                    cache->capacity == shm::kStatusModels;
  return ours ? cache : nullptr;
}

void read_cache(const shm::StatusCache& in, DaemonStatus& out) {
  constexpr auto relaxed = std::memory_order_relaxed;
  out.has_cache = true;
  out.cache_segment_bytes = in.segment_bytes.load(relaxed);
  out.cache_entries = in.entries.load(relaxed);
  out.cache_bytes = in.bytes.load(relaxed);
  out.cache_inserts = in.inserts.load(relaxed);
  out.cache_evictions = in.evictions.load(relaxed);
  // out.models holds at most kStatusModels entries (model_count).
  for (std::size_t m = 0; m < out.models.size(); ++m) {
    const shm::StatusModelCache& row = in.model[m];
    DaemonStatus::Model& model = out.models[m];
    model.cache_enabled = row.enabled.load(relaxed) != 0;
    model.cache_hits = row.hits.load(relaxed);
    model.cache_hit_ns = row.hit_ns.load(relaxed);
    model.cache_misses = row.misses.load(relaxed);
    model.cache_miss_ns = row.miss_ns.load(relaxed);
    model.coalesced = row.coalesced.load(relaxed);
  }
}

constexpr const char* kFlushReasonNames[shm::kFlushReasons] = {
    "hold", "full", "max_wait", "deadline", "target", "fill_time", "no_device", "stopping"};

// Flushes by reason, as the daemon counts them (FlushReason's order); a held batch is not one.
template <typename Counts>
std::vector<std::pair<std::string, std::uint64_t>> read_flushes(const Counts& counts) {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t r = 1; r < shm::kFlushReasons; ++r) {
    out.emplace_back(kFlushReasonNames[r], counts[r].load(std::memory_order_relaxed));
  }
  return out;
}

void read_model_batches(const shm::StatusModelBatches& in, DaemonStatus& out) {
  // out.models holds at most kStatusModels entries (model_count).
  for (std::size_t m = 0; m < out.models.size(); ++m) {
    const shm::StatusModelBatch& batch = in.model[m];
    out.models[m].flushes = read_flushes(batch.flushes);
    for (const auto& bucket : batch.batch_sizes) out.models[m].batch_sizes.push_back(bucket.load(std::memory_order_relaxed));
  }
}

// The daemon's page is shared memory: its count is bounded by the table, never trusted.
std::uint32_t model_count(const shm::StatusModels& models) noexcept {
  return std::min<std::uint32_t>(models.count.load(std::memory_order_acquire), shm::kStatusModels);
}

void read_models(const shm::StatusModels& in, DaemonStatus& out) {
  static constexpr const char* kStates[] = {"absent",   "ready",   "unavailable", "unloading",
                                            "unloaded", "loading", "warming"};
  const std::uint32_t count = model_count(in);
  out.models.reserve(count);
  for (std::uint32_t m = 0; m < count; ++m) {
    const shm::StatusModel& model = in.model[m];
    const std::uint32_t state = model.state.load(std::memory_order_relaxed);
    constexpr auto relaxed = std::memory_order_relaxed;
    DaemonStatus::Model& read = out.models.emplace_back();
    read.name = read_words(model.name);
    read.version = read_words(model.version);
    read.backend = read_words(model.backend);
    read.state = state < std::size(kStates) ? kStates[state] : "unknown";
    read.lanes = model.lanes.load(relaxed);
    read.requests_taken = model.requests_taken.load(relaxed);
    read.requests_ok = model.requests_ok.load(relaxed);
    read.requests_failed = model.requests_failed.load(relaxed);
    read.batches = model.batches.load(relaxed);
    read.inferences = model.inferences.load(relaxed);
    read.queue_ns = model.queue_ns.load(relaxed);
    read.compute_ns = model.compute_ns.load(relaxed);
    read.request_ns = model.request_ns.load(relaxed);
    read.pending = model.pending.load(relaxed);
  }
}

}  // namespace

std::optional<std::uint32_t> find_model_id(const shm::DaemonStatusPage& page, std::size_t file_bytes,
                                           std::string_view name) {
  const shm::StatusModels* models = models_section(page, file_bytes);
  if (models == nullptr) {
    return name == shm::kDefaultModelName ? std::optional<std::uint32_t>(0) : std::nullopt;
  }
  if (name.empty() || name.size() >= shm::kStatusModelNameWords * 8) return std::nullopt;
  const std::uint32_t count = model_count(*models);
  for (std::uint32_t m = 0; m < count; ++m) {
    const shm::StatusModel& model = models->model[m];
    if (model.state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(shm::StatusModelState::kAbsent)) {
      continue;
    }
    if (read_words(model.name) == name) return m;
  }
  return std::nullopt;
}

std::string served_model_names(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  const shm::StatusModels* models = models_section(page, file_bytes);
  if (models == nullptr) return shm::kDefaultModelName;
  std::string names;
  const std::uint32_t count = model_count(*models);
  for (std::uint32_t m = 0; m < count; ++m) {
    const shm::StatusModel& model = models->model[m];
    if (model.state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(shm::StatusModelState::kAbsent)) {
      continue;
    }
    if (!names.empty()) names += ", ";
    names += read_words(model.name);
  }
  return names;
}

std::uint64_t DaemonStatus::Histogram::count() const noexcept {
  std::uint64_t total = 0;
  for (const std::uint64_t n : buckets) total += n;
  return total;
}

DaemonStatus read_daemon_status(const shm::DaemonStatusPage& page, std::size_t file_bytes) {
  DaemonStatus out;
  char backend[sizeof(page.backend) + 1] = {};
  std::memcpy(backend, page.backend, sizeof(page.backend));
  out.backend = backend;
  out.daemon_pid = page.daemon_pid;
  out.age_ns = shm::monotonic_ns() - page.published_ns.load(std::memory_order_acquire);
  out.healthy_devices = page.healthy_devices.load(std::memory_order_relaxed);
  out.workers = page.workers.load(std::memory_order_relaxed);
  out.min_workers = page.min_workers.load(std::memory_order_relaxed);
  out.clients = page.clients.load(std::memory_order_relaxed);
  out.requests_taken = page.requests_taken.load(std::memory_order_relaxed);
  out.requests_ok = page.requests_ok.load(std::memory_order_relaxed);
  out.requests_failed = page.requests_failed.load(std::memory_order_relaxed);
  out.requests_rejected = page.requests_rejected.load(std::memory_order_relaxed);
  out.in_flight = page.in_flight.load(std::memory_order_relaxed);
  out.batches = page.batches.load(std::memory_order_relaxed);
  out.batch_failures = page.batch_failures.load(std::memory_order_relaxed);
  out.requests_abandoned = page.requests_abandoned.load(std::memory_order_relaxed);
  out.policy = policy_name(page.policy.load(std::memory_order_relaxed));
  out.target_batch = page.target_batch.load(std::memory_order_relaxed);
  out.arrivals_per_s = page.arrivals_per_s.load(std::memory_order_relaxed);
  out.flushes = read_flushes(page.flushes);
  for (std::uint32_t wire = 0; wire < shm::kWirePriorities; ++wire) {
    const std::size_t c = class_index(wire);
    out.requests_taken_by_class[c] = page.requests_taken_by_class[wire].load(std::memory_order_relaxed);
    out.requests_shed_by_class[c] = page.requests_shed_by_class[wire].load(std::memory_order_relaxed);
    out.arrivals_per_s_by_class[c] = page.arrivals_per_s_by_class[wire].load(std::memory_order_relaxed);
  }
  out.dead_letters = page.dead_letters.load(std::memory_order_relaxed);
  out.dead_letters_dropped = page.dead_letters_dropped.load(std::memory_order_relaxed);
  out.priority_downgrades = page.priority_downgrades.load(std::memory_order_relaxed);
  out.connections_shed = page.connections_shed.load(std::memory_order_relaxed);
  out.max_batch = page.max_batch.load(std::memory_order_relaxed);
  out.max_wait_ns = page.max_wait_ns.load(std::memory_order_relaxed);
  out.max_batch_bytes = page.max_batch_bytes.load(std::memory_order_relaxed);
  for (const auto& bucket : page.batch_sizes) out.batch_sizes.push_back(bucket.load(std::memory_order_relaxed));
  const std::size_t listed = std::min<std::size_t>(page.devices.load(std::memory_order_relaxed), shm::kStatusDevices);
  for (std::size_t d = 0; d < listed; ++d) {
    out.devices.push_back(read_device(page.device[d], page.cost[d], page.laggard[d], page.probes[d], out.max_batch_bytes));
  }
  if (const shm::StatusLatency* latency = latency_section(page, file_bytes)) read_latency(*latency, out);
  if (const shm::StatusModels* models = models_section(page, file_bytes)) {
    read_models(*models, out);
    if (const shm::StatusModelBatches* batches = model_batches_section(page, file_bytes)) read_model_batches(*batches, out);
    if (const shm::StatusModelDevices* devices = model_devices_section(page, file_bytes)) read_model_devices(*devices, out);
    if (const shm::StatusModelPolicies* policies = model_policies_section(page, file_bytes)) {
      read_model_policies(*policies, out);
    }
    // Read where the daemon-wide histograms are: their bounds are the same.
    if (!out.latency_bounds_ns.empty()) {
      if (const shm::StatusModelLatency* latency = model_latency_section(page, file_bytes)) read_model_latency(*latency, out);
    }
    if (const shm::StatusCache* cache = cache_section(page, file_bytes)) read_cache(*cache, out);
  }
  if (const shm::StatusWorkers* workers = workers_section(page, file_bytes)) read_workers(*workers, out);
  return out;
}

}  // namespace batchd

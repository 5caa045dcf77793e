// One page the daemon shares read-only with every client: whether its drain loop sleeps (so a
// producer knows to ring its doorbell), and the statistics the daemon publishes for batchctl and
// the front-end's /metrics and /readyz. Each field is its own atomic: a reader may see a mix of
// two publications, which is fine for statistics and never unsafe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "shm/align.hpp"
#include "shm/layout.hpp"

namespace batchd::shm {

inline constexpr std::uint64_t kStatusMagic = 0x5354415442415431ULL;  // "1TABTATS"
inline constexpr std::size_t kStatusPageBytes = kPageBytes;
inline constexpr std::size_t kStatusDevices = 32;          // devices beyond this are not listed
inline constexpr std::size_t kBatchSizeBuckets = 16;       // bucket b: sizes in [2^b, 2^(b+1))
inline constexpr std::size_t kFlushReasons = 8;            // daemon's FlushReason values, in order

// Latency histograms (StatusLatency) follow the page, at kStatusLatencyOffset of the same memfd:
// a daemon without them leaves the file one page long, and a client reads them only when the
// file is long enough and their header matches. Bucket b counts durations in
// (kLatencyBoundsNs[b-1], kLatencyBoundsNs[b]]; the last bucket, past every bound, is +Inf.
// Changing the bounds changes what the counts mean: bump kStatusLatencyVersion with them.
inline constexpr std::uint64_t kStatusLatencyMagic = 0x59434e4554414c31ULL;  // "1LATENCY"
inline constexpr std::uint32_t kStatusLatencyVersion = 1;
inline constexpr std::size_t kStatusLatencyOffset = kStatusPageBytes;
inline constexpr std::int64_t kLatencyBoundsNs[] = {
    10'000,      25'000,      50'000,      100'000,       250'000,       500'000,      1'000'000,
    2'500'000,   5'000'000,   10'000'000,  25'000'000,    50'000'000,    100'000'000,  250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
inline constexpr std::size_t kLatencyBuckets = std::size(kLatencyBoundsNs) + 1;  // and +Inf

// StatusDevice::state of a place no device holds now (a workers daemon's empty place).
inline constexpr std::uint32_t kStatusDeviceAbsent = 4;

struct alignas(64) StatusDevice {
  std::atomic<std::uint32_t> state;  // DeviceState: 0 healthy, 1 unhealthy, 2 probing, 3 lost; 4 absent
  // Device memory, in what was padding (0 from a daemon without it): the largest batch, in input
  // bytes, the device's memory takes now (at most max_batch_bytes, so it fits 32 bits), and its
  // free and total memory (total 0: the backend does not report memory).
  std::atomic<std::uint32_t> byte_budget;
  std::atomic<std::uint64_t> batches_ok;
  std::atomic<std::uint64_t> batches_failed;
  std::atomic<std::uint64_t> timeouts;
  std::atomic<std::uint64_t> outstanding_requests;
  std::atomic<std::uint64_t> batch_ns;  // measured batch time (moving average)
  std::atomic<std::uint64_t> memory_free_bytes;
  std::atomic<std::uint64_t> memory_total_bytes;
};
static_assert(sizeof(StatusDevice) == 64, "device memory fills the padding; the table keeps its layout");

// A device's fitted batch cost: fixed + per_item x requests + per_byte x bytes. Picoseconds keep
// a cpu backend's sub-nanosecond per-byte cost visible.
struct StatusCost {
  std::atomic<std::uint64_t> fixed_ns;
  std::atomic<std::uint64_t> per_item_ps;
  std::atomic<std::uint64_t> per_byte_ps;
  std::atomic<std::uint64_t> samples;  // batches the fit has seen
};

struct alignas(64) DaemonStatusPage {
  std::uint64_t magic;                        // kStatusMagic
  std::atomic<std::uint32_t> drain_sleeping;  // 1: a producer must ring the doorbell
  std::uint32_t daemon_pid;
  char backend[16];                           // NUL-terminated backend name
  std::atomic<std::int64_t> published_ns;     // CLOCK_MONOTONIC of the last publication
  std::atomic<std::uint32_t> devices;         // backend devices (listed: min(devices, kStatusDevices))
  std::atomic<std::uint32_t> healthy_devices;
  std::atomic<std::uint64_t> clients;
  std::atomic<std::uint64_t> requests_taken;
  std::atomic<std::uint64_t> requests_ok;
  std::atomic<std::uint64_t> requests_failed;
  std::atomic<std::uint64_t> requests_rejected;
  std::atomic<std::uint64_t> in_flight;       // taken and not yet answered
  std::atomic<std::uint64_t> batches;
  std::atomic<std::uint64_t> batch_failures;
  std::atomic<std::uint64_t> batch_sizes[kBatchSizeBuckets];
  StatusDevice device[kStatusDevices];
  // Appended after the device table, so a client built before them reads the page unchanged.
  // The batching policy in force (a SIGHUP reload changes it), and requests whose client went
  // before they were batched.
  std::atomic<std::uint32_t> max_batch;
  std::atomic<std::uint32_t> policy;  // 0 fixed (all a daemon without this field had), 1 adaptive
  std::atomic<std::int64_t> max_wait_ns;
  std::atomic<std::uint64_t> max_batch_bytes;
  std::atomic<std::uint64_t> requests_abandoned;
  // The adaptive policy's view, refreshed by the drain loop every few milliseconds: its batch size
  // n* now, the arrival rate it sees, why batches were flushed, and each device's fitted cost.
  std::atomic<std::uint32_t> target_batch;
  std::atomic<std::uint32_t> reserved_adaptive;
  std::atomic<std::uint64_t> arrivals_per_s;
  std::atomic<std::uint64_t> flushes[kFlushReasons];
  StatusCost cost[kStatusDevices];
  // Appended in turn: requests taken, by the class their client asked for (index: WirePriority).
  // An older daemon's page has zeroes here (the page starts zero-filled).
  std::atomic<std::uint64_t> requests_taken_by_class[kWirePriorities];
  // By class (index: WirePriority): refused at admission as overloaded, and the arrival rate.
  std::atomic<std::uint64_t> requests_shed_by_class[kWirePriorities];
  std::atomic<std::uint64_t> arrivals_per_s_by_class[kWirePriorities];
  // Appended in turn: requests recorded in the dead-letter log (each failing request once), and
  // records lost on the way (the writer's queue was full, or the file refused the write).
  std::atomic<std::uint64_t> dead_letters;
  std::atomic<std::uint64_t> dead_letters_dropped;
  // Appended in turn: requests that claimed high priority without their user's grant and ran at
  // normal, and connections refused right after accept (their user's handshake rate was spent).
  std::atomic<std::uint64_t> priority_downgrades;
  std::atomic<std::uint64_t> connections_shed;
  // Appended in turn: worker processes (--backend workers) attached now, and how many the daemon
  // needs before it says it is ready (0 from any other daemon).
  std::atomic<std::uint32_t> workers;
  std::atomic<std::uint32_t> min_workers;
  // Appended in turn, by device: whether the router counts it a laggard now (1: far slower than
  // the fastest, so it gets only what it would finish first, and probes), and the probes it ran
  // (copies of a request, to keep its estimate fresh; not counted in batches_ok).
  std::atomic<std::uint32_t> laggard[kStatusDevices];
  std::atomic<std::uint64_t> probes[kStatusDevices];
};

static_assert(std::is_standard_layout_v<DaemonStatusPage>);
static_assert(sizeof(DaemonStatusPage) <= kStatusPageBytes, "the status page is one page");
static_assert(offsetof(DaemonStatusPage, drain_sleeping) == 8, "part of the attach protocol");

// One histogram: counts per bucket (not cumulative; a reader sums them, so its cumulative buckets
// never decrease even when it reads a mix of two publications) and the sum of the durations.
struct StatusHistogram {
  std::atomic<std::uint64_t> buckets[kLatencyBuckets];
  std::atomic<std::uint64_t> sum_ns;
};

// Where time goes: each answered request's queue time (from the daemon taking it off its
// client's ring to the start of the batch run that answered it), by the class its client asked
// for (index: WirePriority), and each successful batch run's compute time, by device.
struct alignas(64) StatusLatency {
  std::uint64_t magic;     // kStatusLatencyMagic, written before the daemon publishes anything
  std::uint32_t version;   // kStatusLatencyVersion
  std::uint32_t buckets;   // kLatencyBuckets
  std::uint32_t classes;   // kWirePriorities
  std::uint32_t devices;   // kStatusDevices
  StatusHistogram queue_by_class[kWirePriorities];
  StatusHistogram compute_by_device[kStatusDevices];
};

static_assert(std::is_standard_layout_v<StatusLatency>);
static_assert(kStatusLatencyOffset % alignof(StatusLatency) == 0);
inline constexpr std::size_t kStatusWorkersOffset =
    kStatusLatencyOffset + round_up_to_page(sizeof(StatusLatency));

// The worker processes attached, after the histograms (read, like them, only when the file is
// long enough and the header matches), one per place: the daemon gives each worker the lowest
// free place of all its workers models, so where one model alone runs on workers its device d is
// place d. Text is NUL-padded, 8 bytes to a word: atomics, so that a reader in the daemon's own
// process races nothing; a reader may see a mix of two names while a place changes hands.
inline constexpr std::uint64_t kStatusWorkersMagic = 0x5352454b524f5731ULL;  // "1WORKERS"
inline constexpr std::uint32_t kStatusWorkersVersion = 2;
inline constexpr std::size_t kStatusTextWords = 4;
struct alignas(64) StatusWorker {
  std::atomic<std::uint32_t> pid;  // 0: no worker in this place
  std::atomic<std::uint32_t> lanes;
  std::atomic<std::uint32_t> model;   // the id of the model it serves (StatusModels)
  std::atomic<std::uint32_t> device;  // its device in that model's router
  std::atomic<std::uint64_t> batches;
  std::atomic<std::uint64_t> name[kStatusTextWords];
  std::atomic<std::uint64_t> version[kStatusTextWords];
  // Each batch's hand-off to the worker in this place and back: its run less the model's time
  // (the latency histograms' buckets). Kept across the workers that held the place.
  StatusHistogram handoff;
};
struct alignas(64) StatusWorkers {
  std::uint64_t magic;     // kStatusWorkersMagic
  std::uint32_t version;   // kStatusWorkersVersion
  std::uint32_t places;    // kStatusDevices
  StatusWorker worker[kStatusDevices];
};
static_assert(std::is_standard_layout_v<StatusWorkers>);

inline constexpr std::size_t kStatusModelsOffset =
    kStatusWorkersOffset + round_up_to_page(sizeof(StatusWorkers));

// The models the daemon serves, after the workers (read, like them, only when the file is long
// enough and the header matches). A request's model id is its model's index here: a client finds
// it by name once. An entry's name is written before `count` covers it (release) and never
// changes: an id is its model's for the daemon's life. Text as in StatusWorker. A daemon without
// the table serves the default model alone, as id 0.
inline constexpr const char* kDefaultModelName = "batchstring";
inline constexpr std::uint64_t kStatusModelsMagic = 0x534c45444f4d5f31ULL;  // "1_MODELS"
inline constexpr std::uint32_t kStatusModelsVersion = 2;
inline constexpr std::size_t kStatusModels = 64;         // models one daemon serves at most
inline constexpr std::size_t kStatusModelNameWords = 8;  // a name: up to 63 bytes, NUL-padded
enum class StatusModelState : std::uint32_t {
  kAbsent = 0,       // no model has this id
  kReady = 1,        // takes requests and has a device to run them
  kUnavailable = 2,  // takes requests, which wait for a device (a workers model with none attached)
  // Model control (shm/model_control.hpp): requests are refused in these three.
  kUnloading = 3,  // answers what it holds, then releases its devices
  kUnloaded = 4,   // declared, not running: a load brings it back
  kLoading = 5,    // its backend is being made
  kWarming = 6,    // takes requests, which wait while its devices run their warm-up batches
};
struct alignas(64) StatusModel {
  std::atomic<std::uint64_t> name[kStatusModelNameWords];
  std::atomic<std::uint64_t> version[kStatusTextWords];
  std::atomic<std::uint64_t> backend[kStatusTextWords];
  std::atomic<std::uint32_t> state;    // StatusModelState
  std::atomic<std::uint32_t> lanes;  // that can run its batches now
  std::atomic<std::uint64_t> requests_taken;
  // As Triton counts them (its nv_inference_* metrics): answers by outcome; successful batch runs
  // and the requests they answered; those requests' summed queue time (taken to run), compute time
  // (their batch's run) and both; and the requests taken but neither answered nor handed to a
  // device yet.
  std::atomic<std::uint64_t> requests_ok;
  std::atomic<std::uint64_t> requests_failed;
  std::atomic<std::uint64_t> batches;
  std::atomic<std::uint64_t> inferences;
  std::atomic<std::uint64_t> queue_ns;
  std::atomic<std::uint64_t> compute_ns;
  std::atomic<std::uint64_t> request_ns;
  std::atomic<std::uint64_t> pending;
};
struct alignas(64) StatusModels {
  std::uint64_t magic;    // kStatusModelsMagic, written once the names are
  std::uint32_t version;  // kStatusModelsVersion
  std::uint32_t capacity; // kStatusModels
  std::atomic<std::uint32_t> count;  // ids 0 .. count - 1 are in use
  StatusModel model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusModels>);
static_assert(kStatusModelsOffset % alignof(StatusModels) == 0);

// Each model's batches, after the models, in a section of its own (a reader of the models table
// before it reads that table as it did): flushes by reason and batch sizes, as the page's
// daemon-wide ones, at the model's id.
inline constexpr std::size_t kStatusModelBatchesOffset =
    kStatusModelsOffset + round_up_to_page(sizeof(StatusModels));
inline constexpr std::uint64_t kStatusModelBatchesMagic = 0x484354414257445fULL;  // "_DWBATCH"
inline constexpr std::uint32_t kStatusModelBatchesVersion = 1;
struct alignas(64) StatusModelBatch {
  std::atomic<std::uint64_t> flushes[kFlushReasons];         // as DaemonStatusPage::flushes
  std::atomic<std::uint64_t> batch_sizes[kBatchSizeBuckets];  // as DaemonStatusPage::batch_sizes
};
struct alignas(64) StatusModelBatches {
  std::uint64_t magic;     // kStatusModelBatchesMagic
  std::uint32_t version;   // kStatusModelBatchesVersion
  std::uint32_t capacity;  // kStatusModels
  StatusModelBatch model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusModelBatches>);
static_assert(kStatusModelBatchesOffset % alignof(StatusModelBatches) == 0);

// Each model's devices, after the models' batches, in a section of its own: what the page holds
// for the default model's devices (state, counters, memory, fitted cost, laggard, probes), for
// every model at its id. Pages of models never declared are never touched.
inline constexpr std::size_t kStatusModelDevicesOffset =
    kStatusModelBatchesOffset +
    round_up_to_page(sizeof(StatusModelBatches));
inline constexpr std::uint64_t kStatusModelDevicesMagic = 0x5345434956454431ULL;  // "1DEVICES"
// 2: the tables' turns on shared devices (a page of version 1 has none: devices of its own).
inline constexpr std::uint32_t kStatusModelDevicesVersion = 2;
struct alignas(64) StatusModelDevice {
  StatusDevice device;
  StatusCost cost;
  std::atomic<std::uint32_t> laggard;  // as DaemonStatusPage::laggard
  std::atomic<std::uint32_t> reserved;
  std::atomic<std::uint64_t> probes;   // as DaemonStatusPage::probes
};
struct alignas(64) StatusModelDeviceTable {
  std::atomic<std::uint32_t> devices;  // its backend's (listed: min(devices, kStatusDevices)); 0 unloaded
  std::atomic<std::uint32_t> healthy;
  // Its devices are shared with other models' (1), where its runs wait for turns: those that
  // waited, and how long in all (daemon/device_group.hpp).
  std::atomic<std::uint32_t> shares_devices;
  std::atomic<std::uint32_t> reserved;
  std::atomic<std::uint64_t> turns_waited;
  std::atomic<std::uint64_t> turn_wait_ns;
  StatusModelDevice device[kStatusDevices];
};
struct alignas(64) StatusModelDevices {
  std::uint64_t magic;     // kStatusModelDevicesMagic
  std::uint32_t version;   // kStatusModelDevicesVersion
  std::uint32_t capacity;  // kStatusModels
  std::uint32_t places;    // kStatusDevices
  StatusModelDeviceTable model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusModelDevices>);
static_assert(kStatusModelDevicesOffset % alignof(StatusModelDevices) == 0);

// Each model's batching policy, after their devices: what the page holds for the default
// model's (the policy in force, its limits, the arrival rate it sees and the batch it aims at).
inline constexpr std::size_t kStatusModelPoliciesOffset =
    kStatusModelDevicesOffset +
    round_up_to_page(sizeof(StatusModelDevices));
inline constexpr std::uint64_t kStatusModelPoliciesMagic = 0x53454943494c4f50ULL;  // "POLICIES"
inline constexpr std::uint32_t kStatusModelPoliciesVersion = 1;
struct alignas(64) StatusModelPolicy {
  std::atomic<std::uint32_t> policy;  // as DaemonStatusPage::policy: 0 fixed, 1 adaptive
  std::atomic<std::uint32_t> max_batch;
  std::atomic<std::int64_t> max_wait_ns;
  std::atomic<std::uint64_t> max_batch_bytes;
  std::atomic<std::uint64_t> arrivals_per_s;
  std::atomic<std::uint32_t> target_batch;
};
struct alignas(64) StatusModelPolicies {
  std::uint64_t magic;     // kStatusModelPoliciesMagic
  std::uint32_t version;   // kStatusModelPoliciesVersion
  std::uint32_t capacity;  // kStatusModels
  StatusModelPolicy model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusModelPolicies>);
static_assert(kStatusModelPoliciesOffset % alignof(StatusModelPolicies) == 0);

// Each model's requests' queue times by class, after their policies: StatusLatency's
// queue_by_class (every model's together), for each model at its id, in the same buckets.
inline constexpr std::size_t kStatusModelLatencyOffset =
    kStatusModelPoliciesOffset +
    round_up_to_page(sizeof(StatusModelPolicies));
inline constexpr std::uint64_t kStatusModelLatencyMagic = 0x45554555515f4d31ULL;  // "1M_QUEUE"
inline constexpr std::uint32_t kStatusModelLatencyVersion = 1;
struct alignas(64) StatusModelQueue {
  StatusHistogram queue_by_class[kWirePriorities];
};
struct alignas(64) StatusModelLatency {
  std::uint64_t magic;     // kStatusModelLatencyMagic
  std::uint32_t version;   // kStatusModelLatencyVersion
  std::uint32_t capacity;  // kStatusModels
  std::uint32_t buckets;   // kLatencyBuckets
  std::uint32_t classes;   // kWirePriorities
  StatusModelQueue model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusModelLatency>);
static_assert(kStatusModelLatencyOffset % alignof(StatusModelLatency) == 0);

// The response caches (docs/CACHE.md), after the models' queue times: each model's hits (its
// clients' own, as they report them, and the daemon's), misses, the time each took, and the
// requests answered with an identical one's answer; and every cache segment's entries together.
inline constexpr std::size_t kStatusCacheOffset =
    kStatusModelLatencyOffset +
    round_up_to_page(sizeof(StatusModelLatency));
inline constexpr std::uint64_t kStatusCacheMagic = 0x5345484341435f31ULL;  // "1_CACHES"
inline constexpr std::uint32_t kStatusCacheVersion = 1;
struct alignas(64) StatusModelCache {
  std::atomic<std::uint32_t> enabled;  // the model's answers are cached (its settings' cache)
  std::atomic<std::uint32_t> reserved;
  std::atomic<std::uint64_t> hits;
  std::atomic<std::uint64_t> hit_ns;
  std::atomic<std::uint64_t> misses;
  std::atomic<std::uint64_t> miss_ns;
  std::atomic<std::uint64_t> coalesced;
};
struct alignas(64) StatusCache {
  std::uint64_t magic;     // kStatusCacheMagic
  std::uint32_t version;   // kStatusCacheVersion
  std::uint32_t capacity;  // kStatusModels
  std::atomic<std::uint64_t> segment_bytes;  // one segment's most (0: no cache)
  std::atomic<std::uint64_t> entries;
  std::atomic<std::uint64_t> bytes;
  std::atomic<std::uint64_t> inserts;
  std::atomic<std::uint64_t> evictions;
  StatusModelCache model[kStatusModels];
};
static_assert(std::is_standard_layout_v<StatusCache>);
static_assert(kStatusCacheOffset % alignof(StatusCache) == 0);

// The memfd the daemon creates: the page, the histograms, the workers, the models, their
// batches, devices, policies, queue times and caches, each in whole pages.
inline constexpr std::size_t kStatusFileBytes =
    kStatusCacheOffset + round_up_to_page(sizeof(StatusCache));

}  // namespace batchd::shm

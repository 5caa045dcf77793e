// What a daemon publishes about itself (shm/status_page.hpp), as one snapshot: the client
// library returns it (Client::daemon_status), the daemon serves it as metrics
// (--metrics-listen), and status_read.hpp reads it from the status file for both. Installed
// beside client.hpp: standard headers only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace batchd {

// The priority classes a snapshot counts by, in the order of client.hpp's Priority (high,
// normal, low), which indexes them.
inline constexpr std::size_t kStatusClasses = 3;
// Their names, by that index: what flags, HTTP headers and metrics labels say.
inline constexpr std::array<const char*, kStatusClasses> kStatusClassNames{"high", "normal", "low"};

// A snapshot of what the daemon publishes about itself (about every 50 ms).
struct DaemonStatus {
  // A duration histogram: counts per bucket, not cumulative (bucket b: durations in
  // (latency_bounds_ns[b-1], latency_bounds_ns[b]]; the last one, past every bound, is +Inf),
  // and the durations' sum.
  struct Histogram {
    std::vector<std::uint64_t> buckets;
    std::uint64_t sum_ns = 0;
    [[nodiscard]] std::uint64_t count() const noexcept;
  };
  struct Device {
    std::string state;  // "healthy", "unhealthy", "probing", "lost", or "absent" (no worker in its place)
    std::uint64_t batches_ok = 0, batches_failed = 0, timeouts = 0, outstanding_requests = 0;
    std::uint64_t batch_ns = 0;  // measured batch time
    // The fitted batch cost: fixed_ns + per_item_ns x requests + per_byte_ns x input bytes, from
    // cost_samples batches.
    double fixed_ns = 0, per_item_ns = 0, per_byte_ns = 0;
    std::uint64_t cost_samples = 0;
    // Far slower than the fastest device now: it gets only what it would finish first, and a
    // probe (a copy of one request, its answer dropped) twice a second; the probes it ran.
    bool laggard = false;
    std::uint64_t probes = 0;
    // Device memory: free and total (total 0: the backend does not report it), and the largest
    // batch in input bytes the device takes now (below max_batch_bytes while its memory is short).
    std::uint64_t memory_free_bytes = 0, memory_total_bytes = 0, byte_budget = 0;
    // Each successful batch run's time on this device (README.md, "Metrics").
    Histogram compute_time;
    // Where the default model runs on workers (--backend workers): the worker process that is
    // this device (worker_pid 0: none), its name and version as it gave them, the batches it runs
    // at once and the batches it answered (attached_workers lists every model's).
    std::uint32_t worker_pid = 0, worker_lanes = 0;
    std::string worker_name, worker_version;
    std::uint64_t worker_batches = 0;
    // Each batch's hand-off to the worker in this place and back (its run less the model's time).
    Histogram worker_handoff;
  };
  std::string backend;
  std::uint32_t daemon_pid = 0;
  std::int64_t age_ns = 0;  // since the daemon last published
  std::uint32_t healthy_devices = 0;
  // Workers attached now, of every model, and how many the daemon needs to be ready: the sum of
  // its workers models' minimums (0: no model runs on workers).
  std::uint32_t workers = 0, min_workers = 0;
  // Each worker process attached, by its place on the status page: the model it serves (its
  // name; its id where the table of models is absent) and its device in that model, its name and
  // version as it gave them, the batches it runs at once and those it answered, and each batch's
  // hand-off to it and back (its run less the model's time, kept across the workers that held
  // the place).
  struct Worker {
    std::uint32_t place = 0;
    std::string model;
    std::uint32_t device = 0;
    std::uint32_t pid = 0, lanes = 0;
    std::string name, version;
    std::uint64_t batches = 0;
    Histogram handoff;
  };
  std::vector<Worker> attached_workers;
  std::uint64_t clients = 0;
  std::uint64_t requests_taken = 0, requests_ok = 0, requests_failed = 0, requests_rejected = 0;
  std::uint64_t in_flight = 0;  // taken by the daemon and not yet answered
  std::uint64_t requests_abandoned = 0;  // their client went before they were batched
  // requests_taken by the class their client asked for; index: static_cast<std::size_t>(Priority).
  std::array<std::uint64_t, kStatusClasses> requests_taken_by_class{};
  // Refused at admission as overloaded (the backlog ahead of them would outlast their deadline),
  // and the arrival rate (requests/s), by class; same index.
  std::array<std::uint64_t, kStatusClasses> requests_shed_by_class{};
  std::array<std::uint64_t, kStatusClasses> arrivals_per_s_by_class{};
  // The batching policy in force: "adaptive" or "fixed". Either flushes at max_batch requests,
  // max_batch_bytes input bytes, or when the oldest has waited max_wait_ns; fixed waits for them,
  // adaptive flushes as soon as waiting no longer pays (at about target_batch requests now, for
  // arrivals_per_s requests per second). flushes: batches by why they were flushed.
  std::string policy;
  std::uint32_t target_batch = 0;
  std::uint64_t arrivals_per_s = 0;
  std::vector<std::pair<std::string, std::uint64_t>> flushes;
  std::uint32_t max_batch = 0;
  std::int64_t max_wait_ns = 0;
  std::uint64_t max_batch_bytes = 0;
  std::uint64_t batches = 0, batch_failures = 0;
  std::vector<std::uint64_t> batch_sizes;  // bucket b counts batches of [2^b, 2^(b+1)) requests
  std::vector<Device> devices;
  // Requests whose input failed alone, each recorded once in the daemon's dead-letter log, and
  // records lost on the way (read_dead_letters lists the recent ones).
  std::uint64_t dead_letters = 0, dead_letters_dropped = 0;
  // Requests that claimed high priority without their user's grant (they ran at normal), and
  // connections refused at accept because their user started handshakes too fast.
  std::uint64_t priority_downgrades = 0, connections_shed = 0;
  // The models the daemon serves, each at its id's index (a request names its model by that id);
  // empty from a daemon built before models, which serves shm's default model alone.
  struct Model {
    std::string name, version, backend;
    // "ready"; "unavailable" (it takes requests, which wait for a lane: a workers model with no
    // worker attached); "warming" (it takes requests, which wait while its devices run their
    // warm-up batches); "unloading", "unloaded" or "loading" (model control: batchctl load,
    // unload; requests are refused); or "absent" (the id names no model now).
    std::string state;
    std::uint32_t lanes = 0;  // that can run its batches now
    std::uint64_t requests_taken = 0;
    // Answers by outcome; successful batch runs and the requests they answered, with those
    // requests' summed queue time, compute time (their batch's run) and both; requests waiting
    // for a batch now. Triton's nv_inference_* metrics (README.md, "Metrics") are these.
    std::uint64_t requests_ok = 0, requests_failed = 0, batches = 0, inferences = 0;
    std::uint64_t queue_ns = 0, compute_ns = 0, request_ns = 0, pending = 0;
    // Its batches, as the daemon-wide flushes and batch_sizes count them; empty from a daemon
    // that publishes none per model.
    std::vector<std::pair<std::string, std::uint64_t>> flushes;
    std::vector<std::uint64_t> batch_sizes;
    // Its devices, as `devices` lists the default model's (compute_time is the default model's
    // alone), and how many of them can run a batch now; none while it is unloaded.
    std::vector<Device> devices;
    std::uint32_t healthy_devices = 0;
    // Its devices are shared with other models' (the daemon's sim or cuda models), where its
    // runs take turns: the runs that waited for one, and how long in all.
    bool shares_devices = false;
    std::uint64_t turns_waited = 0, turn_wait_ns = 0;
    // Its batching policy, as the daemon-wide policy fields below have the default model's.
    std::string policy;
    std::uint32_t max_batch = 0, target_batch = 0;
    std::int64_t max_wait_ns = 0;
    std::uint64_t max_batch_bytes = 0, arrivals_per_s = 0;
    // Its requests' queue times, by class, as queue_time_by_class below counts every model's;
    // empty histograms from a daemon that publishes none per model.
    std::array<Histogram, kStatusClasses> queue_time_by_class{};
    // Its response cache (docs/CACHE.md): whether its answers are cached now; hits (its clients'
    // own and the daemon's) and misses, with the time their lookups and stores took; and
    // requests answered with an identical one's answer (whether cached or not).
    bool cache_enabled = false;
    std::uint64_t cache_hits = 0, cache_hit_ns = 0, cache_misses = 0, cache_miss_ns = 0, coalesced = 0;
  };
  std::vector<Model> models;
  // The response caches together: one segment's most bytes (0: no cache, or a daemon that
  // publishes none), and the records they hold now, their bytes, stores and evictions.
  bool has_cache = false;
  std::uint64_t cache_segment_bytes = 0, cache_entries = 0, cache_bytes = 0, cache_inserts = 0,
                cache_evictions = 0;
  // Whether the daemon publishes each model's devices (Model::devices) and policy (Model::policy
  // and the rest); one built before that lists only the default model's, in `devices` and the
  // policy fields.
  bool devices_by_model = false;
  bool policies_by_model = false;
  bool queue_times_by_model = false;  // Model::queue_time_by_class
  // The histograms' bucket bounds; empty when the daemon publishes no histograms (one built
  // before them), and then the histograms are empty too.
  std::vector<std::int64_t> latency_bounds_ns;
  // Each answered request's queue time: from the daemon taking it to the start of the batch run
  // that answered it, by class; index: static_cast<std::size_t>(Priority).
  std::array<Histogram, kStatusClasses> queue_time_by_class{};
};

}  // namespace batchd

// The daemon's published status (Client::daemon_status) as Prometheus series: batchd-http's
// /metrics appends them to its own, and the daemon's --metrics-listen serves them alone, from this
// one writer, so the two cannot differ.
#include "status/status_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

namespace batchd {

namespace {

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A label value as Prometheus' text format wants it: backslash, quote and newline escaped.
std::string label_value(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string model_labels(const DaemonStatus::Model& model) {
  return fmt::format("model=\"{}\",version=\"{}\"", label_value(model.name), label_value(model.version));
}

// Whose devices a device series is about: each model's (labelled model, version) where the daemon
// publishes them, else the page's, the default model's, unlabelled (a daemon from before that).
struct DeviceGroup {
  std::string labels;  // before `device`, each followed by a comma
  const std::vector<DaemonStatus::Device>* devices;
};

std::vector<DeviceGroup> device_groups(const DaemonStatus& status) {
  std::vector<DeviceGroup> groups;
  if (!status.devices_by_model) {
    groups.push_back({"", &status.devices});
    return groups;
  }
  for (const DaemonStatus::Model& model : status.models) groups.push_back({model_labels(model) + ",", &model.devices});
  return groups;
}

// One series per device of every group: `name{<group labels>device="d"<extra>} value_of(device)`.
template <typename ValueOf>
void per_device(std::string& out, const std::vector<DeviceGroup>& groups, std::string_view name, ValueOf value_of,
                std::string_view extra = {}) {
  for (const DeviceGroup& group : groups) {
    for (std::size_t d = 0; d < group.devices->size(); ++d) {
      fmt::format_to(std::back_inserter(out), "{}{{{}device=\"{}\"{}}} {}\n", name, group.labels, d, extra,
                     value_of((*group.devices)[d]));
    }
  }
}

// One histogram's series of batch sizes. The daemon counts batches of [2^b, 2^(b+1)) requests in
// bucket b, so bucket b's upper bound is 2^(b+1) - 1. It publishes no sum of sizes, so the
// histogram has no _sum series. `labels`: those before le, each followed by a comma.
void render_batch_size_series(std::string_view name, std::string_view labels, const std::vector<std::uint64_t>& buckets,
                              std::string& out) {
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    cumulative += buckets[b];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{}le=\"{}\"}} {}\n", name, labels,
                   (std::uint64_t{2} << b) - 1, cumulative);
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{}le=\"+Inf\"}} {}\n", name, labels, cumulative);
  const std::string_view bare = labels.empty() ? labels : labels.substr(0, labels.size() - 1);
  if (bare.empty()) {
    fmt::format_to(std::back_inserter(out), "{}_count {}\n", name, cumulative);
  } else {
    fmt::format_to(std::back_inserter(out), "{}_count{{{}}} {}\n", name, bare, cumulative);
  }
}

void render_batch_sizes(const DaemonStatus& status, std::string& out) {
  family(out, "batchd_daemon_batch_size", "histogram", "Requests per batch the daemon ran, every model's.");
  render_batch_size_series("batchd_daemon_batch_size", "", status.batch_sizes, out);
}

void render_cost_fits(const std::vector<DeviceGroup>& groups, std::string& out) {
  const auto series = [&](std::string_view name, std::string_view type, std::string_view help, auto value_of) {
    family(out, name, type, help);
    per_device(out, groups, name, value_of);
  };
  series("batchd_daemon_device_cost_fixed_seconds", "gauge",
         "Fitted batch cost per device: the fixed part of a batch's time.",
         [](const DaemonStatus::Device& dev) { return dev.fixed_ns / 1e9; });
  series("batchd_daemon_device_cost_per_request_seconds", "gauge",
         "Fitted batch cost per device: the time each request adds.",
         [](const DaemonStatus::Device& dev) { return dev.per_item_ns / 1e9; });
  series("batchd_daemon_device_cost_per_byte_seconds", "gauge",
         "Fitted batch cost per device: the time each input byte adds.",
         [](const DaemonStatus::Device& dev) { return dev.per_byte_ns / 1e9; });
  series("batchd_daemon_device_cost_samples_total", "counter", "Batches each device's cost fit has seen.",
         [](const DaemonStatus::Device& dev) { return dev.cost_samples; });
  series("batchd_daemon_device_laggard", "gauge",
         "1 while the device is far slower than the fastest: it gets only what it would finish first, "
         "and probes.",
         [](const DaemonStatus::Device& dev) { return dev.laggard ? 1 : 0; });
  series("batchd_daemon_device_probes_total", "counter",
         "Probes a laggard device ran: copies of one request whose answers are dropped, to keep its "
         "cost estimate fresh.",
         [](const DaemonStatus::Device& dev) { return dev.probes; });
}

void render_policy(const DaemonStatus& status, std::string& out) {
  family(out, "batchd_daemon_policy_info", "gauge", "The batching policy in force (label policy).");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_policy_info{{policy=\"{}\"}} 1\n", status.policy);
  family(out, "batchd_daemon_target_batch", "gauge",
         "The batch size the policy aims at now (adaptive: from the fitted cost and arrival rate).");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_target_batch {}\n", status.target_batch);
  family(out, "batchd_daemon_arrival_rate", "gauge", "Requests per second the daemon sees arrive (EWMA).");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_arrival_rate {}\n", status.arrivals_per_s);
  family(out, "batchd_daemon_flushes_total", "counter", "Batches flushed, by why.");
  for (const auto& [reason, count] : status.flushes) {
    fmt::format_to(std::back_inserter(out), "batchd_daemon_flushes_total{{reason=\"{}\"}} {}\n", reason, count);
  }
}

// Device memory: free and total where the backend reports it, and the byte budget everywhere.
void render_device_memory(const std::vector<DeviceGroup>& groups, std::string& out) {
  using Device = DaemonStatus::Device;
  const auto reported_only = [&](std::string_view name, std::string_view help, auto value) {
    family(out, name, "gauge", help);
    for (const DeviceGroup& group : groups) {
      for (std::size_t d = 0; d < group.devices->size(); ++d) {
        const Device& dev = (*group.devices)[d];
        if (dev.memory_total_bytes == 0) continue;
        fmt::format_to(std::back_inserter(out), "{}{{{}device=\"{}\"}} {}\n", name, group.labels, d, value(dev));
      }
    }
  };
  reported_only("batchd_daemon_device_memory_free_bytes", "Each device's free memory.",
                [](const Device& dev) { return dev.memory_free_bytes; });
  reported_only("batchd_daemon_device_memory_total_bytes", "Each device's memory.",
                [](const Device& dev) { return dev.memory_total_bytes; });
  family(out, "batchd_daemon_device_byte_budget", "gauge",
         "The largest batch, in input bytes, each device's memory takes now.");
  per_device(out, groups, "batchd_daemon_device_byte_budget", [](const Device& dev) { return dev.byte_budget; });
}

// A duration in seconds as Prometheus writes a float: shortest round-trip form ("2.5e-05").
std::string seconds_text(std::int64_t ns) { return fmt::format("{}", static_cast<double>(ns) / 1e9); }

// One histogram's _bucket (cumulative), _sum and _count series under `labels` ("class=\"high\"").
void render_histogram(std::string& out, std::string_view name, std::string_view labels,
                      const DaemonStatus::Histogram& histogram, const std::vector<std::int64_t>& bounds) {
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < histogram.buckets.size(); ++b) {
    cumulative += histogram.buckets[b];
    const std::string le = b < bounds.size() ? seconds_text(bounds[b]) : "+Inf";
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cumulative);
  }
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n", name, labels,
                 static_cast<double>(histogram.sum_ns) / 1e9);
  fmt::format_to(std::back_inserter(out), "{}_count{{{}}} {}\n", name, labels, cumulative);
}

// Where a request's time goes: waiting for its batch to start (by class), and the batch's run
// (by device). Absent when the daemon publishes no histograms.
void render_latency(const DaemonStatus& status, std::string& out) {
  if (status.latency_bounds_ns.empty()) return;
  family(out, "batchd_request_queue_seconds", "histogram",
         "Each answered request's wait from the daemon taking it to the start of the batch run that "
         "answered it, by model and priority class.");
  for (std::size_t c = 0; c < kStatusClasses; ++c) {
    if (!status.queue_times_by_model) {  // a daemon from before them: every model's together
      render_histogram(out, "batchd_request_queue_seconds", fmt::format("class=\"{}\"", kStatusClassNames[c]),
                       status.queue_time_by_class[c], status.latency_bounds_ns);
      continue;
    }
    for (const DaemonStatus::Model& model : status.models) {
      render_histogram(out, "batchd_request_queue_seconds",
                       fmt::format("{},class=\"{}\"", model_labels(model), kStatusClassNames[c]),
                       model.queue_time_by_class[c], status.latency_bounds_ns);
    }
  }
  // The daemon times the default model's devices' runs alone: its group is the first.
  family(out, "batchd_batch_compute_seconds", "histogram",
         "Each successful batch run's time on its device, by device of the default model.");
  const std::vector<DeviceGroup> groups = device_groups(status);
  if (groups.empty()) return;
  const DeviceGroup& timed = groups.front();
  for (std::size_t d = 0; d < timed.devices->size(); ++d) {
    render_histogram(out, "batchd_batch_compute_seconds", fmt::format("{}device=\"{}\"", timed.labels, d),
                     (*timed.devices)[d].compute_time, status.latency_bounds_ns);
  }
}

// The worker processes: how many, how many the daemon needs, and who each is (by the model it
// serves and its device there).
void render_workers(const DaemonStatus& status, std::string& out) {
  family(out, "batchd_daemon_workers", "gauge", "Worker processes attached to the daemon.");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_workers {}\n", status.workers);
  family(out, "batchd_daemon_min_workers", "gauge", "Workers the daemon needs attached before it is ready.");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_min_workers {}\n", status.min_workers);
  const auto labels = [](const DaemonStatus::Worker& worker) {
    return fmt::format("device=\"{}\",model=\"{}\"", worker.device, label_value(worker.model));
  };
  family(out, "batchd_worker_info", "gauge", "1 for the worker process that is each device of a model.");
  for (const DaemonStatus::Worker& worker : status.attached_workers) {
    fmt::format_to(std::back_inserter(out), "batchd_worker_info{{{},name=\"{}\",version=\"{}\",pid=\"{}\",lanes=\"{}\"}} 1\n",
                   labels(worker), label_value(worker.name), label_value(worker.version), worker.pid, worker.lanes);
  }
  if (!status.latency_bounds_ns.empty()) {
    family(out, "batchd_worker_handoff_seconds", "histogram",
           "Each batch's hand-off to the worker that is each device of a model and back: its run less the "
           "model's own time.");
    for (const DaemonStatus::Worker& worker : status.attached_workers) {
      render_histogram(out, "batchd_worker_handoff_seconds", labels(worker), worker.handoff, status.latency_bounds_ns);
    }
  }
  family(out, "batchd_worker_batches_total", "counter", "Batches the worker that is each device of a model answered.");
  for (const DaemonStatus::Worker& worker : status.attached_workers) {
    fmt::format_to(std::back_inserter(out), "batchd_worker_batches_total{{{}}} {}\n", labels(worker), worker.batches);
  }
}

void render_devices(const DaemonStatus& status, std::string& out) {
  using Device = DaemonStatus::Device;
  static constexpr std::string_view kStates[] = {"healthy", "unhealthy", "probing", "lost", "absent"};
  const std::vector<DeviceGroup> groups = device_groups(status);
  family(out, "batchd_daemon_device_state", "gauge", "1 for each device's current state.");
  for (const std::string_view state : kStates) {
    per_device(out, groups, "batchd_daemon_device_state", [&](const Device& dev) { return dev.state == state ? 1 : 0; },
               fmt::format(",state=\"{}\"", state));
  }
  family(out, "batchd_daemon_device_batches_total", "counter", "Batches each device ran, by result.");
  per_device(out, groups, "batchd_daemon_device_batches_total", [](const Device& dev) { return dev.batches_ok; },
             ",result=\"ok\"");
  per_device(out, groups, "batchd_daemon_device_batches_total", [](const Device& dev) { return dev.batches_failed; },
             ",result=\"failed\"");
  family(out, "batchd_daemon_device_timeouts_total", "counter", "Batches that overran the device timeout.");
  per_device(out, groups, "batchd_daemon_device_timeouts_total", [](const Device& dev) { return dev.timeouts; });
  family(out, "batchd_daemon_device_outstanding_requests", "gauge", "Requests each device is running.");
  per_device(out, groups, "batchd_daemon_device_outstanding_requests",
             [](const Device& dev) { return dev.outstanding_requests; });
  family(out, "batchd_daemon_device_batch_seconds", "gauge", "Each device's measured time per batch.");
  per_device(out, groups, "batchd_daemon_device_batch_seconds",
             [](const Device& dev) { return static_cast<double>(dev.batch_ns) / 1e9; });
  render_cost_fits(groups, out);
  render_device_memory(groups, out);
}

// Each model's batching policy, as batchd_daemon_policy_info and the rest have the default model's.
void render_model_policies(const DaemonStatus& status, std::string& out) {
  using Model = DaemonStatus::Model;
  family(out, "batchd_model_policy_info", "gauge", "Each model's batching policy in force (label policy).");
  for (const Model& model : status.models) {
    fmt::format_to(std::back_inserter(out), "batchd_model_policy_info{{{},policy=\"{}\"}} 1\n", model_labels(model),
                   model.policy);
  }
  const auto series = [&](std::string_view name, std::string_view help, auto value_of) {
    family(out, name, "gauge", help);
    for (const Model& model : status.models) {
      fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, model_labels(model), value_of(model));
    }
  };
  series("batchd_model_max_batch", "Each model's batching policy: most requests in one batch.",
         [](const Model& model) { return model.max_batch; });
  series("batchd_model_max_wait_seconds", "Each model's batching policy: longest a request waits for its batch to fill.",
         [](const Model& model) { return static_cast<double>(model.max_wait_ns) / 1e9; });
  series("batchd_model_target_batch",
         "The batch size each model's policy aims at now (adaptive: from the fitted cost and arrival rate).",
         [](const Model& model) { return model.target_batch; });
  series("batchd_model_arrival_rate", "Requests per second each model's policy sees arrive (EWMA).",
         [](const Model& model) { return model.arrivals_per_s; });
}

// The turns of models whose devices are shared with other models' (daemon/device_group.hpp).
void render_model_turns(const DaemonStatus& status, std::string& out) {
  using Model = DaemonStatus::Model;
  family(out, "batchd_model_device_turns_waited_total", "counter",
         "Batch runs of each model that waited for its turn on devices shared with other models.");
  for (const Model& model : status.models) {
    if (!model.shares_devices) continue;
    fmt::format_to(std::back_inserter(out), "batchd_model_device_turns_waited_total{{{}}} {}\n", model_labels(model),
                   model.turns_waited);
  }
  family(out, "batchd_model_device_turn_wait_seconds_total", "counter",
         "Time each model's batch runs waited for turns on devices shared with other models.");
  for (const Model& model : status.models) {
    if (!model.shares_devices) continue;
    fmt::format_to(std::back_inserter(out), "batchd_model_device_turn_wait_seconds_total{{{}}} {}\n",
                   model_labels(model), static_cast<double>(model.turn_wait_ns) / 1e9);
  }
}

// Each model's state and counters: batchd's own names, and Triton's (nv_inference_*), with Triton's
// meaning and labels, for the dashboards and autoscalers that read them.
void render_models(const DaemonStatus& status, std::string& out) {
  family(out, "batchd_model_state", "gauge", "1 for each model's state: ready, warming, unavailable (no lane can run it), loading, ...");
  for (const DaemonStatus::Model& model : status.models) {
    fmt::format_to(std::back_inserter(out), "batchd_model_state{{{},backend=\"{}\",state=\"{}\"}} 1\n", model_labels(model),
                   label_value(model.backend), model.state);
  }
  if (status.devices_by_model) {
    family(out, "batchd_model_healthy_devices", "gauge", "Devices that can run each model's batches now.");
    for (const DaemonStatus::Model& model : status.models) {
      fmt::format_to(std::back_inserter(out), "batchd_model_healthy_devices{{{}}} {}\n", model_labels(model),
                     model.healthy_devices);
    }
  }
  if (std::any_of(status.models.begin(), status.models.end(),
                  [](const DaemonStatus::Model& m) { return m.shares_devices; })) {
    render_model_turns(status, out);
  }
  if (status.policies_by_model) render_model_policies(status, out);
  family(out, "batchd_model_requests_taken_total", "counter", "Requests the daemon took for each model.");
  for (const DaemonStatus::Model& model : status.models) {
    fmt::format_to(std::back_inserter(out), "batchd_model_requests_taken_total{{{}}} {}\n", model_labels(model),
                   model.requests_taken);
  }
  family(out, "batchd_model_flushes_total", "counter", "Each model's batches flushed, by why.");
  for (const DaemonStatus::Model& model : status.models) {
    for (const auto& [reason, count] : model.flushes) {
      fmt::format_to(std::back_inserter(out), "batchd_model_flushes_total{{{},reason=\"{}\"}} {}\n", model_labels(model),
                     reason, count);
    }
  }
  family(out, "batchd_model_batch_size", "histogram", "Requests per batch each model ran.");
  for (const DaemonStatus::Model& model : status.models) {
    if (!model.batch_sizes.empty()) {
      render_batch_size_series("batchd_model_batch_size", model_labels(model) + ",", model.batch_sizes, out);
    }
  }
  struct Family {
    std::string_view name, type, help;
    std::uint64_t DaemonStatus::Model::*value;
    bool microseconds;
  };
  static constexpr Family kTriton[] = {
      {"nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes",
       &DaemonStatus::Model::requests_ok, false},
      {"nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes",
       &DaemonStatus::Model::requests_failed, false},
      {"nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)",
       &DaemonStatus::Model::inferences, false},
      {"nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)",
       &DaemonStatus::Model::batches, false},
      {"nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds",
       &DaemonStatus::Model::request_ns, true},
      {"nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds",
       &DaemonStatus::Model::queue_ns, true},
      {"nv_inference_compute_infer_duration_us", "counter", "Cumulative compute inference duration in microseconds",
       &DaemonStatus::Model::compute_ns, true},
      {"nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution",
       &DaemonStatus::Model::pending, false},
  };
  for (const Family& f : kTriton) {
    family(out, f.name, f.type, f.help);
    for (const DaemonStatus::Model& model : status.models) {
      const std::uint64_t value = model.*f.value;
      fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", f.name, model_labels(model),
                     f.microseconds ? value / 1000 : value);
    }
  }
}

// The response caches (docs/CACHE.md): Triton's per-model cache metrics, for the models whose
// answers are cached, and batchd's own.
void render_cache(const DaemonStatus& status, std::string& out) {
  using Model = DaemonStatus::Model;
  struct Family {
    std::string_view name, help;
    std::uint64_t Model::*value;
    bool microseconds;
  };
  static constexpr Family kTriton[] = {
      {"nv_cache_num_hits_per_model", "Number of cache hits per model", &Model::cache_hits, false},
      {"nv_cache_num_misses_per_model", "Number of cache misses per model", &Model::cache_misses, false},
      {"nv_cache_hit_duration_per_model", "Total cache hit duration per model, in microseconds", &Model::cache_hit_ns,
       true},
      {"nv_cache_miss_duration_per_model",
       "Total cache miss (lookup and insertion) duration per model, in microseconds", &Model::cache_miss_ns, true},
  };
  for (const Family& f : kTriton) {
    family(out, f.name, "counter", f.help);
    for (const Model& model : status.models) {
      if (!model.cache_enabled && model.cache_hits == 0 && model.cache_misses == 0) continue;
      const std::uint64_t value = model.*f.value;
      fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", f.name, model_labels(model),
                     f.microseconds ? value / 1000 : value);
    }
  }
  family(out, "batchd_model_coalesced_requests_total", "counter",
         "Requests answered with the answer of an identical request in flight, without a run of their own.");
  for (const Model& model : status.models) {
    fmt::format_to(std::back_inserter(out), "batchd_model_coalesced_requests_total{{{}}} {}\n", model_labels(model),
                   model.coalesced);
  }
  const auto gauge = [&](std::string_view name, std::string_view type, std::string_view help, std::uint64_t value) {
    family(out, name, type, help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
  };
  gauge("batchd_cache_segment_bytes", "gauge", "The most memory one response-cache segment takes (0: no cache).",
        status.cache_segment_bytes);
  gauge("batchd_cache_entries", "gauge", "Answers held in the response caches now.", status.cache_entries);
  gauge("batchd_cache_bytes", "gauge", "Bytes of the response caches' logs that held answers take now.",
        status.cache_bytes);
  gauge("batchd_cache_inserts_total", "counter", "Answers stored in the response caches.", status.cache_inserts);
  gauge("batchd_cache_evictions_total", "counter", "Answers the response caches dropped to make room.",
        status.cache_evictions);
}

}  // namespace

void render_daemon_status(const DaemonStatus* status, std::string& out) {
  family(out, "batchd_daemon_up", "gauge", "1 while this front-end is attached to a daemon.");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_up {}\n", status != nullptr ? 1 : 0);
  if (status == nullptr) return;
  auto gauge = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    family(out, name, type, help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
  };
  gauge("batchd_daemon_status_age_seconds", "gauge", "Time since the daemon last published its status.",
        static_cast<double>(status->age_ns) / 1e9);
  gauge("batchd_daemon_healthy_devices", "gauge", "Devices the daemon can run batches on.", status->healthy_devices);
  if (status->min_workers > 0 || status->workers > 0) render_workers(*status, out);
  if (!status->models.empty()) render_models(*status, out);
  if (status->has_cache) render_cache(*status, out);
  gauge("batchd_daemon_clients", "gauge", "Clients attached to the daemon.", status->clients);
  gauge("batchd_daemon_queue_depth", "gauge", "Requests the daemon has taken and not yet answered.",
        status->in_flight);
  family(out, "batchd_daemon_requests_total", "counter", "Requests the daemon finished, by result.");
  fmt::format_to(std::back_inserter(out), "batchd_daemon_requests_total{{result=\"ok\"}} {}\n", status->requests_ok);
  fmt::format_to(std::back_inserter(out), "batchd_daemon_requests_total{{result=\"failed\"}} {}\n",
                 status->requests_failed);
  fmt::format_to(std::back_inserter(out), "batchd_daemon_requests_total{{result=\"rejected\"}} {}\n",
                 status->requests_rejected);
  gauge("batchd_daemon_requests_abandoned_total", "counter",
        "Requests dropped unanswered because their client went before they were batched.",
        status->requests_abandoned);
  gauge("batchd_daemon_max_batch", "gauge", "The batching policy: most requests in one batch.", status->max_batch);
  gauge("batchd_daemon_max_wait_seconds", "gauge",
        "The batching policy: longest a request waits for its batch to fill.",
        static_cast<double>(status->max_wait_ns) / 1e9);
  gauge("batchd_daemon_requests_taken_total", "counter", "Requests the daemon took from its clients.",
        status->requests_taken);
  family(out, "batchd_daemon_class_requests_taken_total", "counter",
         "Requests the daemon took from its clients, by the priority class they asked for.");
  for (std::size_t c = 0; c < kStatusClasses; ++c) {
    fmt::format_to(std::back_inserter(out), "batchd_daemon_class_requests_taken_total{{class=\"{}\"}} {}\n",
                   kStatusClassNames[c], status->requests_taken_by_class[c]);
  }
  family(out, "batchd_daemon_class_requests_shed_total", "counter",
         "Requests refused at admission as overloaded (the backlog ahead would outlast their deadline), "
         "by priority class.");
  for (std::size_t c = 0; c < kStatusClasses; ++c) {
    fmt::format_to(std::back_inserter(out), "batchd_daemon_class_requests_shed_total{{class=\"{}\"}} {}\n",
                   kStatusClassNames[c], status->requests_shed_by_class[c]);
  }
  family(out, "batchd_daemon_class_arrival_rate", "gauge", "Requests per second arriving (EWMA), by priority class.");
  for (std::size_t c = 0; c < kStatusClasses; ++c) {
    fmt::format_to(std::back_inserter(out), "batchd_daemon_class_arrival_rate{{class=\"{}\"}} {}\n",
                   kStatusClassNames[c], status->arrivals_per_s_by_class[c]);
  }
  gauge("batchd_daemon_batches_total", "counter", "Batches the daemon ran.", status->batches);
  gauge("batchd_daemon_batch_failures_total", "counter", "Batches that failed.", status->batch_failures);
  gauge("batchd_daemon_dead_letters_total", "counter",
        "Requests whose input made the backend fail alone, each recorded once in the dead-letter log.",
        status->dead_letters);
  gauge("batchd_daemon_dead_letters_dropped_total", "counter",
        "Dead-letter records lost: the log's queue was full, or its file refused the write.",
        status->dead_letters_dropped);
  gauge("batchd_daemon_priority_downgrades_total", "counter",
        "Requests that claimed high priority without their user's grant, and ran at normal.",
        status->priority_downgrades);
  gauge("batchd_daemon_connections_shed_total", "counter",
        "Connections refused at accept: their user started handshakes faster than its rate.",
        status->connections_shed);
  render_batch_sizes(*status, out);
  render_policy(*status, out);
  render_devices(*status, out);
  render_latency(*status, out);
}

}  // namespace batchd

#include "daemon/options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <thread>

#include "daemon/batch_policy.hpp"
#include "daemon/config_file.hpp"
#include "shm/worker_region.hpp"
#include "text/listen_address.hpp"
#include "tracing/trace_options.hpp"

namespace batchd {
namespace {

// Option values that need converting after parsing.
struct RawOptions {
  std::string policy = "adaptive";
  std::optional<std::uint32_t> max_batch;  // its default depends on the policy
  double max_wait_ms = 50.0;
  std::int64_t device_timeout_ms = 2000;
  std::uint32_t inline_max_us = 50;
  std::vector<std::string> fail_every, slow;
  std::string memory_feedback = "on";
  std::string sim_memory_other;
  double dead_letter_max_mib = 16.0;
  std::string dead_letter_inputs = "off";
  std::uint32_t worker_spin_us = 50;
  std::vector<std::string> models;  // --model NAME[:KEY=VALUE,...]
  std::string cache_scope = "user";
  std::string coalesce = "auto";
  double cache_mib = 320.0;
  std::vector<std::string> warmup_inputs;
  std::uint32_t warmup_count = 0;  // inputs made up when none are given; 0: the largest batch's
};

// "D:V" pairs for the sim fault flags.
template <class V>
std::vector<std::pair<unsigned, V>> parse_pairs(const std::vector<std::string>& items, const char* flag) {
  std::vector<std::pair<unsigned, V>> out;
  for (const auto& item : items) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw CLI::ValidationError(flag, "expects DEVICE:VALUE, got '" + item + "'");
    }
    out.emplace_back(static_cast<unsigned>(std::stoul(item.substr(0, colon))),
                     static_cast<V>(std::stod(item.substr(colon + 1))));
  }
  return out;
}

// Device-memory feedback, and the sim backend's memory (docs/POLICY.md, "Device memory").
void define_memory_options(CLI::App& app, CLI::Option_group& sim, DaemonConfig& c, RawOptions& raw) {
  sim.add_option("--sim-memory-mib", c.sim.memory_mib,
                 "each device's memory; a batch that does not fit fails as out of memory (0: unlimited)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 30));
  sim.add_option("--sim-memory-per-byte", c.sim.memory_per_byte,
                 "device bytes a batch needs per input byte while it runs")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 20));
  sim.add_option("--sim-memory-other", raw.sim_memory_other,
                 "PERCENT:MS,...: another tenant's share of each device's memory, a repeating cycle of "
                 "linear ramps (to PERCENT over MS), e.g. 80:1000,80:1000,0:1000,0:1000");
  app.add_option("--memory-feedback", raw.memory_feedback,
                 "on: a device whose memory use passes --memory-high-water gets smaller batches, and "
                 "none that would not fit; off: memory is only shown")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--memory-high-water", c.routing.memory.high_water,
                 "fraction of a device's memory that batches may fill it to (0 < F <= 1)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0))->check(
          [](const std::string& text) {
            return std::strtod(text.c_str(), nullptr) > 0 ? std::string() : std::string("must be more than 0");
          });
}

// The dead-letter log (README.md, "Dead letters").
void define_dead_letter_options(CLI::App& app, DaemonConfig& c, RawOptions& raw) {
  app.add_option("--dead-letter", c.dead_letters.path,
                 "append a JSON line to FILE for each request whose input fails alone (a poison "
                 "input); without it the last " + std::to_string(c.dead_letters.recent_entries) +
                     " are kept in memory only (batchctl dead-letters lists them either way)");
  app.add_option("--dead-letter-max-mib", raw.dead_letter_max_mib,
                 "rotate the dead-letter file to FILE.1 before it grows past this (fractional)")
      ->capture_default_str()->check(CLI::Range(0.0, 1024.0 * 1024.0))->check([](const std::string& text) {
        return std::strtod(text.c_str(), nullptr) > 0 ? std::string() : std::string("must be more than 0");
      });
  app.add_option("--dead-letter-inputs", raw.dead_letter_inputs,
                 "on: each dead-letter file record carries the input itself (it may be private; "
                 "off, the default, records only its SHA-256 and size)")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
}

// --backend workers (docs/WORKERS.md).
void define_worker_options(CLI::App& app, DaemonConfig& c, RawOptions& raw) {
  auto* w = app.add_option_group("workers backend", "worker processes attach as devices");
  w->add_option("--max-workers", c.workers.max_workers, "workers attached at once at most")
      ->capture_default_str()->check(CLI::Range(1U, 64U));
  w->add_option("--worker-lanes", c.workers.lanes_per_worker,
                "batches one worker runs at once at most (it may ask for fewer)")
      ->capture_default_str()->check(CLI::Range(1U, shm::kMaxWorkerBuffers));
  w->add_option("--min-workers", c.workers.min_workers,
                "workers attached before /readyz says ready (batchd-http answers 503 no_worker below it)")
      ->capture_default_str()->check(CLI::Range(0U, 64U));
  w->add_option("--worker-spin-us", raw.worker_spin_us,
                "a lane spins this long for a worker's answer before it sleeps")
      ->capture_default_str()->check(CLI::Range(0U, 100'000U));
  w->add_option("--worker-allow-uid", c.workers.allowed_uids,
                "also accept workers with this uid (a worker sees every client's inputs; by default "
                "only the daemon's own user may attach as one, whatever --allow-uid says)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  w->add_option("--worker-allow-gid", c.workers.allowed_gids, "also accept workers with this gid")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// A model's warm-up (docs/MODELS.md, "Warm-up").
void define_warmup_options(CLI::App& app, DaemonConfig& c, RawOptions& raw) {
  auto* w = app.add_option_group("warm-up", "batches each device runs before it takes requests");
  w->add_option("--warmup-batch-sizes", c.routing.warmup.batch_sizes,
                "run batches of these sizes (capped at --max-batch) on each device before the model is ready "
                "and the device takes requests, at start, on load and on a worker's attach; none: no warm-up")
      ->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->check(CLI::Range(1U, 1U << 20));
  w->add_option("--warmup-inputs", raw.warmup_inputs, "the warm-up's inputs, cycled (repeatable; default: made up)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  w->add_option("--warmup-count", raw.warmup_count,
                "without --warmup-inputs: this many made-up inputs (default: the largest warm-up batch's size)")
      ->check(CLI::Range(1U, 1U << 20));
  w->add_option("--warmup-rounds", c.routing.warmup.rounds, "times each warm-up batch size runs on each device")
      ->capture_default_str()->check(CLI::Range(1U, 100U));
}

void define_options(CLI::App& app, DaemonOptions& o, RawOptions& raw) {
  DaemonConfig& c = o.config;
  // The last value wins, so a flag overrides the same key from the config file.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--config", o.config_path, "TOML config file; flags override its keys");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->capture_default_str()->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--socket", c.socket_path,
                 "control socket path (default: $XDG_RUNTIME_DIR/batchd/batchd.sock, or "
                 "/run/batchd/batchd.sock as root)");
  app.add_option("--backend", c.backend,
                 "auto (cuda if a GPU is visible, else cpu), cpu, sim, cuda, plugin:PATH, or workers "
                 "(worker processes attach and run the model: batchd-worker, batchd.Worker)")
      ->capture_default_str();
  app.add_option("--devices", c.cuda_devices, "cuda devices to use (default: all visible)")
      ->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--streams-per-device", c.streams_per_device, "cuda streams per device")
      ->capture_default_str()->check(CLI::Range(1U, 16U));
  app.add_option("--plugin-config", c.plugin_config, "string passed to a plug-in's init");
  app.add_option("--spare-batches", c.routing.spare_batches,
                 "batches that may wait for a busy device lane, beyond one per lane; 0 dispatches "
                 "a batch only to a free lane, so under load batches grow with the backlog "
                 "instead of queueing behind a running one")
      ->capture_default_str()->check(CLI::Range(0U, 64U));
  app.add_option("--device-timeout-ms", raw.device_timeout_ms,
                 "a batch running longer marks its device unhealthy")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  auto* sim = app.add_option_group("sim backend", "simulated GPUs for tests and benchmarks");
  sim->add_option("--sim-devices", c.sim.devices, "simulated devices")->capture_default_str();
  sim->add_option("--sim-fixed-us", c.sim.fixed_us, "cost per batch")->capture_default_str();
  sim->add_option("--sim-per-item-us", c.sim.per_item_us, "cost per request")->capture_default_str();
  sim->add_option("--sim-per-byte-ns", c.sim.per_byte_ns, "cost per input byte")->capture_default_str();
  sim->add_option("--sim-repeat", c.sim.repeat, "answer = input reversed, repeated this often")
      ->capture_default_str()->check(CLI::Range(1U, 64U));
  sim->add_option("--sim-fail-every", raw.fail_every, "DEVICE:K: that device fails every K-th batch")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sim->add_option("--sim-slow", raw.slow, "DEVICE:FACTOR: that device's costs times FACTOR")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sim->add_option("--sim-hang", c.sim.hang_devices, "DEVICE: every batch there hangs")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sim->add_option("--sim-hang-ms", c.sim.hang_ms, "how long a hang lasts")->capture_default_str();
  sim->add_option("--sim-poison", c.sim.poison_prefix,
                  "an input starting with this fails its whole batch");
  sim->add_option("--sim-outage-ms", c.sim.outage_ms,
                  "every device fails for this long after start")->capture_default_str();
  sim->add_option("--sim-load-ms", c.sim.load_ms,
                  "making the backend (a model's load) takes this long")->capture_default_str()
      ->check(CLI::Range(0U, 600'000U));
  sim->add_option("--sim-cold-ms", c.sim.cold_ms,
                  "each device's first batch takes this much longer (a model's lazy initialisation)")
      ->capture_default_str()->check(CLI::Range(0U, 600'000U));
  define_memory_options(app, *sim, c, raw);
  define_dead_letter_options(app, c, raw);
  define_worker_options(app, c, raw);
  define_warmup_options(app, c, raw);
  tracing::add_trace_flags(app, c.tracing);
  app.add_option("--policy", raw.policy,
                 "adaptive: batch sizes and waits follow the measured batch cost and arrival rate, "
                 "within --max-batch and --max-wait-ms (docs/POLICY.md); fixed: flush at "
                 "--max-batch requests or after --max-wait-ms, whichever first")
      ->capture_default_str()->check(CLI::IsMember({"adaptive", "fixed"}));
  app.add_option("--max-batch", raw.max_batch,
                 "flush a batch at this many requests (default: " +
                     std::to_string(kFixedDefaultMaxBatch) + " with --policy fixed, " +
                     std::to_string(kAdaptiveDefaultMaxBatch) +
                     " with adaptive, or with cuda what fills a GPU: its resident threads / "
                     "--streams-per-device)")
      ->check(CLI::Range(1U, 1U << 20));
  app.add_option("--max-wait-ms", raw.max_wait_ms,
                 "flush a batch when its oldest request has waited this long (fractional; 0: at "
                 "once; with --policy adaptive a ceiling)")
      ->capture_default_str()->check(CLI::Range(0.0, 60'000.0));
  app.add_option("--max-batch-bytes", c.batch.max_batch_bytes,
                 "flush before a batch's inputs would exceed this many bytes")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, kMaxBatchBytes));
  app.add_option("--cost", c.cost, "SHA-256 rounds per input (cpu backend)")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--cpu-threads", c.cpu_threads, "cpu backend worker threads")
      ->capture_default_str()->check(CLI::Range(1U, 1024U));
  app.add_option("--slots-per-client", c.segment.slot_count,
                 "requests one client may have in flight (power of two)")->capture_default_str();
  app.add_option("--max-input-bytes", c.segment.max_input_bytes, "largest accepted input")
      ->capture_default_str();
  app.add_option("--max-output-bytes", c.segment.max_output_bytes, "largest answer")
      ->capture_default_str();
  app.add_option("--max-clients", c.max_clients,
                 "attached clients at most (each holds 4 open files; checked against the open-file "
                 "limit at start)")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--max-clients-per-uid", c.max_clients_per_uid,
                 "attached clients of one user at most, so one user cannot take every slot")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--attach-timeout-ms", c.attach_timeout_ms,
                 "a connection that sends no attach request within this is closed")
      ->capture_default_str()->check(CLI::Range(1U, 600'000U));
  app.add_option("--allow-uid", c.allowed_uids, "also accept clients with this uid")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--allow-gid", c.allowed_gids, "also accept clients with this gid")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--high-priority-uid", c.high_priority_uids,
                 "clients with this uid may run requests at high priority (besides the daemon's own "
                 "user; anyone else's high requests run at normal, counted as downgrades)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--high-priority-gid", c.high_priority_gids,
                 "clients with this gid may run requests at high priority")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--inline-max-us", raw.inline_max_us,
                 "a backend that allows it (cpu) runs a batch on the drain thread, without a hand-off "
                 "to a worker, while its measured run time is at most this; 0: never")
      ->capture_default_str()->check(CLI::Range(0U, 1'000'000U));
  app.add_option("--metrics-listen", c.metrics_listen,
                 "ADDR:PORT (or [ADDR]:PORT) where the daemon serves GET /metrics itself, in Prometheus "
                 "text, for deployments without batchd-http; port 0 picks a free one")
      ->check([](const std::string& text) {
        const auto address = parse_listen_address(text, "--metrics-listen");
        return address ? std::string() : address.error().message;
      });
  app.add_option("--fair-slice-us", c.fair_slice_us,
                 "close a batch holding a request of another tenant (user) or priority class before "
                 "the next would make that request wait more than twice its time alone, once the "
                 "batch runs at least this long (or twice the device's fixed batch cost); a batch "
                 "one tenant fills alone is never cut; 0: off")
      ->capture_default_str()->check(CLI::Range(0U, 10'000'000U));
  app.add_option("--normal-floor-percent", c.normal_floor_percent,
                 "the share of what is served (by cost) that normal-priority requests keep while "
                 "they wait, however much high there is; 0: strict priority")
      ->capture_default_str()->check(CLI::Range(0U, 50U));
  app.add_option("--low-floor-percent", c.low_floor_percent,
                 "the share of what is served (by cost) that low-priority requests keep while they "
                 "wait; 0: strict priority")
      ->capture_default_str()->check(CLI::Range(0U, 50U));
  app.add_option("--drain-spin-us", c.drain_spin_us,
                 "busy-poll this long before the drain loop sleeps")->capture_default_str();
  app.add_option("--cache", c.cache,
                 "the model is pure (an input always gets the same answer): keep its answers in the "
                 "response cache, answered in the caller's own process, and run identical requests in "
                 "flight once (docs/CACHE.md)")
      ->capture_default_str();
  app.add_option("--cache-scope", raw.cache_scope,
                 "who shares the model's cached answers: user (the clients of one uid) or all (every "
                 "client can read every answer: see docs/CACHE.md)")
      ->capture_default_str()->check(CLI::IsMember({"user", "all"}));
  app.add_option("--coalesce", raw.coalesce,
                 "identical requests in flight run once: on, off, or auto (on with --cache)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--cache-mib", raw.cache_mib,
                 "the response caches' memory in all, split between the all-users cache and up to "
                 "--cache-users per-user ones, used only as answers are stored; 0: no cache")
      ->capture_default_str()->check(CLI::Range(0.0, 1024.0 * 1024));
  app.add_option("--cache-users", c.cache_users, "users (uids) with a response cache of their own at once")
      ->capture_default_str()->check(CLI::Range(1U, 64U));
  app.add_flag("--cache-test-one-bucket", c.cache_test_one_bucket)->group("");  // tests: one bucket
  app.add_option("--model", raw.models,
                 "NAME[:KEY=VALUE,...]: serve a model by that name besides batchstring, its keys (those of "
                 "a [models.NAME] table: backend, version, policy, max_batch, cost, sim_devices, ...) "
                 "overriding the others for it; repeatable")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// Flags that set the daemon as a whole: a model's keys may not.
bool daemon_wide(std::string_view flag) {
  static constexpr std::string_view kFlags[] = {
      "--config", "--log-level", "--socket", "--slots-per-client", "--max-input-bytes", "--max-output-bytes",
      "--max-clients", "--max-clients-per-uid", "--attach-timeout-ms", "--allow-uid", "--allow-gid",
      "--high-priority-uid", "--high-priority-gid", "--metrics-listen", "--drain-spin-us", "--dead-letter",
      "--dead-letter-max-mib", "--dead-letter-inputs", "--model", "--cache-mib", "--cache-users",
      "--cache-test-one-bucket", "--trace-endpoint", "--trace-protocol", "--trace-rate", "--trace-count",
      "--trace-resource"};
  return std::find(std::begin(kFlags), std::end(kFlags), flag) != std::end(kFlags);
}

// Model names go into URLs (/v2/models/NAME) and metric labels as they are.
bool valid_model_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxModelNameBytes || name.front() == '.' || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

// --model NAME[:KEY=VALUE[,KEY=VALUE...]], as a [models.NAME] table's flags. A value in double
// quotes may hold commas (plugin_config="a=1,b=2"); the quotes go.
ModelArgs parse_model_flag(const std::string& text) {
  ModelArgs model;
  const std::size_t colon = text.find(':');
  model.name = text.substr(0, colon);
  if (colon == std::string::npos) return model;
  std::string_view rest = std::string_view(text).substr(colon + 1);
  const auto malformed = [&](std::string_view item, const char* why) {
    return CLI::ValidationError("--model", std::string(why) + ", got '" + std::string(item) + "' in '" + text + "'");
  };
  while (!rest.empty()) {
    const std::size_t equals = rest.find('=');
    const std::size_t comma = rest.find(',');
    if (equals == std::string_view::npos || equals == 0 || comma < equals) {
      throw malformed(rest.substr(0, comma), "expects NAME:KEY=VALUE,...");
    }
    std::string key(rest.substr(0, equals));
    std::string value;
    rest.remove_prefix(equals + 1);
    if (rest.starts_with('"')) {
      const std::size_t close = rest.find('"', 1);
      if (close == std::string_view::npos) throw malformed(rest, "a quoted value needs its closing quote");
      value = rest.substr(1, close - 1);
      rest.remove_prefix(close + 1);
      if (!rest.empty() && !rest.starts_with(',')) throw malformed(rest, "expects a comma after a quoted value");
    } else {
      value = rest.substr(0, rest.find(','));
      rest.remove_prefix(value.size());
    }
    if (!rest.empty()) rest.remove_prefix(1);  // the comma
    if (key == "version") {
      model.version = value;
      continue;
    }
    std::replace(key.begin(), key.end(), '_', '-');
    model.args.push_back("--" + key);
    model.args.push_back(value);
  }
  return model;
}

// The defaults that depend on the machine.
void machine_defaults(DaemonOptions& o) {
  o.config.backend = "auto";
  o.config.cpu_threads = std::max(1U, std::thread::hardware_concurrency());
}

void finish(DaemonOptions& o, const RawOptions& raw) {
  DaemonConfig& c = o.config;
  c.batch.policy = parse_policy(raw.policy).value_or(PolicyKind::kAdaptive);
  c.batch.max_batch = raw.max_batch.value_or(
      c.batch.policy == PolicyKind::kFixed ? kFixedDefaultMaxBatch : kAdaptiveDefaultMaxBatch);
  c.batch.max_batch_from_backend =
      !raw.max_batch.has_value() && c.batch.policy == PolicyKind::kAdaptive;
  c.batch.max_wait = std::chrono::nanoseconds(static_cast<std::int64_t>(raw.max_wait_ms * 1e6));
  c.routing.device_timeout = std::chrono::milliseconds(raw.device_timeout_ms);
  c.routing.inline_run_max = std::chrono::microseconds(raw.inline_max_us);
  c.sim.fail_every = parse_pairs<unsigned>(raw.fail_every, "--sim-fail-every");
  c.sim.slow = parse_pairs<double>(raw.slow, "--sim-slow");
  c.routing.memory.enabled = raw.memory_feedback == "on";
  auto schedule = parse_memory_schedule(raw.sim_memory_other);
  if (!schedule) throw CLI::ValidationError("--sim-memory-other", schedule.error().message);
  c.sim.memory_other = std::move(*schedule);
  c.dead_letters.max_file_bytes =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(raw.dead_letter_max_mib * 1024 * 1024));
  c.dead_letters.include_inputs = raw.dead_letter_inputs == "on";
  c.workers.spin = std::chrono::microseconds(raw.worker_spin_us);
  c.cache_scope = raw.cache_scope == "all" ? ModelSettings::CacheScope::kAll : ModelSettings::CacheScope::kUser;
  if (raw.coalesce != "auto") c.coalesce = raw.coalesce == "on";
  c.cache_bytes = static_cast<std::uint64_t>(raw.cache_mib * 1024 * 1024);
  try {
    tracing::finish_trace_options(c.tracing);
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError("tracing", e.what());
  }
  WarmupOptions& warmup = c.routing.warmup;
  warmup.inputs = raw.warmup_inputs;
  if (warmup.inputs.empty() && !warmup.batch_sizes.empty()) {
    const std::uint32_t count =
        raw.warmup_count != 0 ? raw.warmup_count : *std::max_element(warmup.batch_sizes.begin(), warmup.batch_sizes.end());
    for (std::uint32_t i = 0; i < count; ++i) warmup.inputs.push_back("batchd warm-up input " + std::to_string(i));
  }
}

// A model's list replaces the top level's instead of adding to it: `flags`' values in `args`
// ("--flag V ...", "--flag=V") go.
std::vector<std::string> without_flags(const std::vector<std::string>& args, const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool dropped = std::any_of(flags.begin(), flags.end(), [&](const std::string& flag) {
      return args[i] == flag || args[i].starts_with(flag + "=");
    });
    if (!dropped) {
      out.push_back(args[i]);
      continue;
    }
    if (args[i].find('=') != std::string::npos) continue;
    if (i + 1 < args.size()) ++i;  // its value, whatever it looks like
    while (i + 1 < args.size() && !args[i + 1].starts_with("--")) ++i;  // more of them
  }
  return out;
}

// CLI11 parses a reversed vector.
void parse_args(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());
  app.parse(args);
}

std::string find_config_path(const std::vector<std::string>& args) {
  std::string path;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) path = args[i + 1];
    if (args[i].starts_with("--config=")) path = args[i].substr(9);
  }
  return path;
}

// The file alone, so that an error can name its line.
Expected<void> check_config_file(const std::string& path, const ConfigArgs& file) {
  DaemonOptions scratch;
  RawOptions raw;
  CLI::App app;
  define_options(app, scratch, raw);
  for (const auto& [flag, line] : file.lines) {
    if (flag == "--config" || app.get_option_no_throw(flag) == nullptr) {
      return make_failure(std::errc::invalid_argument, path + " line " + std::to_string(line) +
                                                           ": unknown key for option " + flag);
    }
  }
  try {
    parse_args(app, file.args);
    finish(scratch, raw);
  } catch (const CLI::Error& e) {
    std::string message = path + ": " + e.what();
    for (const auto& [flag, line] : file.lines) {
      if (std::string(e.what()).find(flag) != std::string::npos) {
        message = path + " line " + std::to_string(line) + ": " + e.what();
      }
    }
    return make_failure(std::errc::invalid_argument, std::move(message));
  }
  return {};
}

// The file's flags, checked on their own.
Expected<ConfigArgs> read_checked_config(const std::string& path) {
  Expected<ConfigArgs> file = read_config_file(path);
  if (!file) return file;
  if (auto checked = check_config_file(path, *file); !checked) return checked.error();
  return file;
}

// One model's settings: the daemon's flags (file, then command line), then its own.
Expected<ModelConfig> model_config(const ModelArgs& model, const std::vector<std::string>& daemon_args) {
  const std::string where = "model " + model.name;
  if (!valid_model_name(model.name)) {
    return make_failure(std::errc::invalid_argument,
                        where + ": a model name is 1 to " + std::to_string(kMaxModelNameBytes) +
                            " letters, digits, '_', '-' or '.', not starting with '-' or '.'");
  }
  for (std::size_t i = 0; i < model.args.size(); i += 2) {
    if (daemon_wide(model.args[i])) {
      const auto line = model.lines.find(model.args[i]);
      return make_failure(std::errc::invalid_argument,
                          where + (line != model.lines.end() ? " (line " + std::to_string(line->second) + ")" : "") +
                              ": " + model.args[i] + " is the daemon's, not a model's: set it at the top level");
    }
  }
  DaemonOptions scratch;
  machine_defaults(scratch);
  RawOptions raw;
  CLI::App app;
  define_options(app, scratch, raw);
  std::vector<std::string> lists;
  for (const char* flag : {"--warmup-batch-sizes", "--warmup-inputs"}) {
    if (std::find(model.args.begin(), model.args.end(), flag) != model.args.end()) lists.emplace_back(flag);
  }
  std::vector<std::string> all = without_flags(daemon_args, lists);
  all.insert(all.end(), model.args.begin(), model.args.end());
  try {
    parse_args(app, all);
    finish(scratch, raw);
  } catch (const CLI::Error& e) {
    return make_failure(std::errc::invalid_argument, where + ": " + e.what());
  }
  ModelConfig config;
  config.name = model.name;
  if (!model.version.empty()) config.version = model.version;
  config.settings = scratch.config;
  return config;
}

// The file's models, then the command line's (--model): a name given twice is one model, the
// later keys overriding.
Expected<void> declare_models(const ConfigArgs& file, const RawOptions& raw, const std::vector<std::string>& daemon_args,
                          DaemonConfig& out) {
  std::vector<ModelArgs> models = file.models;
  try {
    for (const std::string& flag : raw.models) {
      ModelArgs model = parse_model_flag(flag);
      auto same = std::find_if(models.begin(), models.end(), [&](const ModelArgs& m) { return m.name == model.name; });
      if (same == models.end()) {
        models.push_back(std::move(model));
        continue;
      }
      same->args.insert(same->args.end(), model.args.begin(), model.args.end());
      if (!model.version.empty()) same->version = model.version;
    }
  } catch (const CLI::Error& e) {
    return make_failure(std::errc::invalid_argument, e.what());
  }
  for (const ModelArgs& model : models) {
    Expected<ModelConfig> config = model_config(model, daemon_args);
    if (!config) return config.error();
    if (config->name == kDefaultModelName) {
      // Its own table overrides the top-level keys for batchstring alone (model id 0).
      static_cast<ModelSettings&>(out) = config->settings;
      out.default_model_version = config->version;
      continue;
    }
    out.models.push_back(std::move(*config));
  }
  if (out.models.size() + 1 > kMaxModels) {
    return make_failure(std::errc::invalid_argument, "at most " + std::to_string(kMaxModels) +
                                                         " models (batchstring included) in one daemon");
  }
  return {};
}

}  // namespace

int parse_daemon_options(const std::vector<std::string>& args, DaemonOptions& out, std::string& message) {
  ConfigArgs file;
  if (const std::string path = find_config_path(args); !path.empty()) {
    Expected<ConfigArgs> checked = read_checked_config(path);
    if (!checked) {
      message = checked.error().message;
      return 2;
    }
    file = std::move(*checked);
  }
  CLI::App app{"batchd: batches single string requests from local processes onto a backend"};
  out = DaemonOptions{};
  machine_defaults(out);
  RawOptions raw;
  define_options(app, out, raw);
  std::vector<std::string> all = file.args;
  all.insert(all.end(), args.begin(), args.end());
  try {
    parse_args(app, all);
    finish(out, raw);
  } catch (const CLI::CallForHelp&) {
    message = app.help();
    return 0;
  } catch (const CLI::Error& e) {
    message = e.what();
    return 2;
  }
  if (auto added = declare_models(file, raw, all, out.config); !added) {
    message = added.error().message;
    return 2;
  }
  return -1;
}

}  // namespace batchd

// batchctl: what a running daemon says about itself (its status page), once, repeated or as a
// live view (batchctl top), and its dead letters (batchctl dead-letters); the jobs queue in Redis
// (batchctl jobs).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <iostream>
#include <optional>
#include <thread>

#include "client_lib/client.hpp"
#include "text/json_escape.hpp"
#include "tools/batchctl_jobs.hpp"
#include "tools/top_screen.hpp"

namespace {

// A duration in the unit that shows it: a cpu batch takes microseconds, a GPU's milliseconds, and
// "0.000 ms" told a reader nothing.
std::string duration_text(double ns) {
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

constexpr batchd::Priority kClasses[] = {batchd::Priority::kHigh, batchd::Priority::kNormal,
                                         batchd::Priority::kLow};

std::uint64_t taken(const batchd::DaemonStatus& s, batchd::Priority priority) {
  return s.requests_taken_by_class[static_cast<std::size_t>(priority)];
}

// A device's memory line: "" when the backend does not report memory and nothing is held back.
std::string memory_text(const batchd::DaemonStatus::Device& dev, std::uint64_t max_batch_bytes) {
  std::string out;
  if (dev.memory_total_bytes != 0) {
    out = fmt::format("{:.1f} of {:.1f} MiB free", static_cast<double>(dev.memory_free_bytes) / (1 << 20),
                      static_cast<double>(dev.memory_total_bytes) / (1 << 20));
  }
  if (dev.byte_budget < max_batch_bytes) {
    out += fmt::format("{}batches held to {} input bytes", out.empty() ? "" : ", ", dev.byte_budget);
  }
  return out.empty() ? out : "  memory: " + out + "\n";
}

// "87.5 % hits", or "no lookups".
std::string hit_rate(std::uint64_t hits, std::uint64_t misses) {
  if (hits + misses == 0) return "no lookups";
  return fmt::format("{:.1f} % hits", 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses));
}

std::string as_text(const batchd::DaemonStatus& s) {
  std::string out = fmt::format(
      "backend {} (pid {}), {} of {} devices healthy, {} clients\n"
      "policy: {}, batches of up to {} requests or {} bytes, waiting at most {:.3f} ms{}\n"
      "requests: {} taken, {} ok, {} failed ({} refused before running), {} in flight, {} "
      "abandoned by their client\n"
      "by class (high, normal, low): taken {} / {} / {}, shed as overloaded {} / {} / {}, arriving {} / {} / {} per s\n"
      "high priority claimed without a grant (ran at normal): {}; connections shed at accept: {}\n"
      "dead letters: {} recorded, {} dropped (batchctl dead-letters lists them)\n"
      "batches: {} ({} failed); sizes:",
      s.backend, s.daemon_pid, s.healthy_devices, s.devices.size(), s.clients, s.policy, s.max_batch,
      s.max_batch_bytes, static_cast<double>(s.max_wait_ns) / 1e6,
      s.policy == "adaptive" ? fmt::format("; now about {} requests per batch at {} arrivals/s",
                                           s.target_batch, s.arrivals_per_s)
                             : std::string(),
      s.requests_taken, s.requests_ok, s.requests_failed, s.requests_rejected, s.in_flight,
      s.requests_abandoned, taken(s, batchd::Priority::kHigh), taken(s, batchd::Priority::kNormal),
      taken(s, batchd::Priority::kLow), s.requests_shed_by_class[0], s.requests_shed_by_class[1],
      s.requests_shed_by_class[2], s.arrivals_per_s_by_class[0], s.arrivals_per_s_by_class[1],
      s.arrivals_per_s_by_class[2], s.priority_downgrades, s.connections_shed, s.dead_letters,
      s.dead_letters_dropped, s.batches, s.batch_failures);
  for (std::size_t b = 0; b < s.batch_sizes.size(); ++b) {
    if (s.batch_sizes[b] != 0) out += fmt::format(" [{}..{}]:{}", 1U << b, (2U << b) - 1, s.batch_sizes[b]);
  }
  out += "\nflushed:";
  for (const auto& [reason, count] : s.flushes) {
    if (count != 0) out += fmt::format(" {}:{}", reason, count);
  }
  out += "\n";
  std::uint64_t all_batches = 0;
  for (const auto& dev : s.devices) all_batches += dev.batches_ok;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    const auto& dev = s.devices[d];
    const bool fitted = dev.fixed_ns > 0 || dev.per_item_ns > 0 || dev.per_byte_ns > 0;
    out += fmt::format("device {}: {:9} {} batches ok ({:.1f} % of all), {} failed, {} timeouts, {} requests "
                       "outstanding, batch time {}; {} ({} batches)\n",
                       d, dev.state, dev.batches_ok,
                       all_batches == 0 ? 0.0 : 100.0 * static_cast<double>(dev.batches_ok) / static_cast<double>(all_batches),
                       dev.batches_failed, dev.timeouts,
                       dev.outstanding_requests, duration_text(static_cast<double>(dev.batch_ns)),
                       fitted ? fmt::format("fitted cost {} + {}/request + {:.3f} ns/byte", duration_text(dev.fixed_ns),
                                            duration_text(dev.per_item_ns), dev.per_byte_ns)
                              : std::string("cost not fitted yet"),
                       dev.cost_samples);
    if (dev.laggard || dev.probes > 0) {
      out += fmt::format("  {}{} probes run\n",
                         dev.laggard ? "laggard: far slower than the fastest device, it gets only what it "
                                       "would finish first; "
                                     : "",
                         dev.probes);
    }
    out += memory_text(dev, s.max_batch_bytes);
    if (dev.worker_pid != 0) {
      out += fmt::format("  worker: {} {} (pid {}, {} lanes, {} batches answered)\n", dev.worker_name,
                         dev.worker_version, dev.worker_pid, dev.worker_lanes, dev.worker_batches);
    }
  }
  if (s.min_workers > 0 || s.workers > 0) {
    out += fmt::format("workers: {} attached, {} needed to be ready (--min-workers)\n", s.workers, s.min_workers);
  }
  for (const batchd::DaemonStatus::Worker& worker : s.attached_workers) {
    out += fmt::format("  model {} device {}: worker {} {} (pid {}, {} lanes, {} batches answered)\n", worker.model,
                       worker.device, worker.name, worker.version, worker.pid, worker.lanes, worker.batches);
  }
  if (s.models.size() > 1) {
    out += "models:\n";
    for (const batchd::DaemonStatus::Model& model : s.models) {
      out += fmt::format("  {} version {} ({}): {}, {} lanes, {} of {} devices healthy, {} requests taken; "
                         "policy {}, target batch {}, {} requests/s\n",
                         model.name, model.version, model.backend, model.state, model.lanes, model.healthy_devices,
                         model.devices.size(), model.requests_taken, model.policy.empty() ? "?" : model.policy,
                         model.target_batch, model.arrivals_per_s);
    }
  }
  bool any_cached = false;
  for (const batchd::DaemonStatus::Model& model : s.models) {
    if (!model.cache_enabled && model.coalesced == 0) continue;
    if (!any_cached) {
      out += fmt::format("response cache: {} entries, {:.1f} MiB of {:.0f} MiB a segment; {} stored, {} evicted\n",
                         s.cache_entries, static_cast<double>(s.cache_bytes) / (1 << 20),
                         static_cast<double>(s.cache_segment_bytes) / (1 << 20), s.cache_inserts, s.cache_evictions);
      any_cached = true;
    }
    out += fmt::format("  {}: {}{} hits, {} misses ({}), {} coalesced\n", model.name,
                       model.cache_enabled ? "" : "not cached; ", model.cache_hits, model.cache_misses,
                       hit_rate(model.cache_hits, model.cache_misses), model.coalesced);
  }
  return out;
}

// A device's worker as JSON: null when no worker is in its place.
std::string worker_json(const batchd::DaemonStatus::Device& dev) {
  if (dev.worker_pid == 0) return "null";
  std::string out = "{\"name\":\"";
  batchd::text::append_json_escaped(dev.worker_name, out);
  out += "\",\"version\":\"";
  batchd::text::append_json_escaped(dev.worker_version, out);
  // The hand-off histogram: counts per bucket of the latency bounds (not cumulative), and the sum.
  out += fmt::format("\",\"pid\":{},\"lanes\":{},\"batches\":{},\"handoff\":{{\"buckets\":[{}],\"sum_ns\":{}}}}}",
                     dev.worker_pid, dev.worker_lanes, dev.worker_batches, fmt::join(dev.worker_handoff.buckets, ","),
                     dev.worker_handoff.sum_ns);
  return out;
}

// Devices (the default model's, or one model's) as a JSON array's contents.
std::string devices_json(const std::vector<batchd::DaemonStatus::Device>& list) {
  std::string devices;
  for (const auto& dev : list) {
    devices += fmt::format("{}{{\"state\":\"{}\",\"batches_ok\":{},\"batches_failed\":{},\"timeouts\":{},"
                           "\"outstanding_requests\":{},\"batch_ns\":{},\"cost\":{{\"fixed_ns\":{},"
                           "\"per_item_ns\":{},\"per_byte_ns\":{},\"samples\":{}}},\"memory_free_bytes\":{},"
                           "\"memory_total_bytes\":{},\"byte_budget\":{},\"laggard\":{},\"probes\":{},\"worker\":{}}}",
                           devices.empty() ? "" : ",", dev.state, dev.batches_ok, dev.batches_failed,
                           dev.timeouts, dev.outstanding_requests, dev.batch_ns, dev.fixed_ns,
                           dev.per_item_ns, dev.per_byte_ns, dev.cost_samples, dev.memory_free_bytes,
                           dev.memory_total_bytes, dev.byte_budget, dev.laggard, dev.probes, worker_json(dev));
  }
  return devices;
}

// Every model's workers and the models themselves, as JSON arrays' contents.
std::string attached_workers_json(const batchd::DaemonStatus& s) {
  std::string out;
  for (const batchd::DaemonStatus::Worker& worker : s.attached_workers) {
    out += out.empty() ? "{\"model\":\"" : ",{\"model\":\"";
    batchd::text::append_json_escaped(worker.model, out);
    out += fmt::format("\",\"device\":{},\"place\":{},\"name\":\"", worker.device, worker.place);
    batchd::text::append_json_escaped(worker.name, out);
    out += "\",\"version\":\"";
    batchd::text::append_json_escaped(worker.version, out);
    out += fmt::format("\",\"pid\":{},\"lanes\":{},\"batches\":{}}}", worker.pid, worker.lanes, worker.batches);
  }
  return out;
}

std::string models_json(const batchd::DaemonStatus& s) {
  std::string out;
  for (const batchd::DaemonStatus::Model& model : s.models) {
    out += out.empty() ? "{\"name\":\"" : ",{\"name\":\"";
    batchd::text::append_json_escaped(model.name, out);
    out += "\",\"version\":\"";
    batchd::text::append_json_escaped(model.version, out);
    out += "\",\"backend\":\"";
    batchd::text::append_json_escaped(model.backend, out);
    out += fmt::format("\",\"state\":\"{}\",\"lanes\":{},\"requests_taken\":{},\"healthy_devices\":{},"
                       "\"devices\":[{}],\"shares_devices\":{},\"turns_waited\":{},\"turn_wait_ns\":{},"
                       "\"policy\":\"{}\",\"max_batch\":{},\"max_wait_ns\":{},"
                       "\"max_batch_bytes\":{},\"target_batch\":{},\"arrivals_per_s\":{},"
                       "\"cache\":{{\"enabled\":{},\"hits\":{},\"hit_ns\":{},\"misses\":{},\"miss_ns\":{},"
                       "\"coalesced\":{}}}}}",
                       model.state, model.lanes, model.requests_taken, model.healthy_devices,
                       devices_json(model.devices), model.shares_devices, model.turns_waited, model.turn_wait_ns,
                       model.policy, model.max_batch, model.max_wait_ns,
                       model.max_batch_bytes, model.target_batch, model.arrivals_per_s, model.cache_enabled,
                       model.cache_hits, model.cache_hit_ns, model.cache_misses, model.cache_miss_ns, model.coalesced);
  }
  return out;
}

std::string as_json(const batchd::DaemonStatus& s) {
  const std::string devices = devices_json(s.devices);
  std::string flushes;
  for (const auto& [reason, count] : s.flushes) {
    flushes += fmt::format("{}\"{}\":{}", flushes.empty() ? "" : ",", reason, count);
  }
  std::string by_class;
  for (const batchd::Priority priority : kClasses) {
    by_class += fmt::format("{}\"{}\":{}", by_class.empty() ? "" : ",", batchd::priority_name(priority),
                            taken(s, priority));
  }
  return fmt::format(
      "{{\"backend\":\"{}\",\"daemon_pid\":{},\"healthy_devices\":{},\"workers\":{},\"min_workers\":{},\"clients\":{},"
      "\"requests_taken\":{},\"requests_taken_by_class\":{{{}}},\"requests_ok\":{},"
      "\"requests_failed\":{},\"requests_rejected\":{},"
      "\"in_flight\":{},\"requests_abandoned\":{},\"policy\":\"{}\",\"target_batch\":{},"
      "\"arrivals_per_s\":{},\"flushes\":{{{}}},\"max_batch\":{},\"max_wait_ns\":{},"
      "\"max_batch_bytes\":{},\"dead_letters\":{},\"dead_letters_dropped\":{},"
      "\"priority_downgrades\":{},\"connections_shed\":{},\"batches\":{},"
      "\"batch_failures\":{},\"batch_sizes\":[{}],\"latency_bounds_ns\":[{}],\"devices\":[{}],"
      "\"attached_workers\":[{}],\"models\":[{}]}}",
      s.backend, s.daemon_pid, s.healthy_devices, s.workers, s.min_workers, s.clients, s.requests_taken, by_class,
      s.requests_ok, s.requests_failed, s.requests_rejected, s.in_flight, s.requests_abandoned, s.policy,
      s.target_batch, s.arrivals_per_s, flushes, s.max_batch,
      s.max_wait_ns, s.max_batch_bytes, s.dead_letters, s.dead_letters_dropped, s.priority_downgrades,
      s.connections_shed, s.batches, s.batch_failures,
      fmt::join(s.batch_sizes, ","), fmt::join(s.latency_bounds_ns, ","), devices, attached_workers_json(s),
      models_json(s));
}

// The dead letters as a table: one row per record, oldest first.
std::string dead_letters_text(const batchd::DeadLetters& letters) {
  std::string out = fmt::format("dead letters: {} recorded since the daemon started, {} dropped; {}\n",
                                letters.recorded, letters.dropped,
                                letters.entries.empty() ? std::string("none kept")
                                                        : fmt::format("the last {}:", letters.entries.size()));
  if (letters.entries.empty()) return out;
  out += fmt::format("{:<24}  {:<16}  {:<14}  {:>6}  {:<64}  {:>8}  {:<22}  {}\n", "TIME (UTC)", "MODEL", "REASON",
                     "DEVICE", "INPUT SHA-256", "BYTES", "CLIENT (PID/UID)", "ERROR");
  for (const batchd::DeadLetter& letter : letters.entries) {
    out += fmt::format("{:<24}  {:<16}  {:<14}  {:>6}  {:<64}  {:>8}  {:<22}  {}\n", letter.time, letter.model,
                       letter.reason, letter.device, letter.input_sha256, letter.input_bytes,
                       fmt::format("{} ({}/{})", letter.client_id, letter.pid, letter.uid), letter.error);
  }
  return out;
}

std::string dead_letters_json(const batchd::DeadLetters& letters) {
  std::string entries;
  for (const batchd::DeadLetter& letter : letters.entries) {
    entries += (entries.empty() ? "" : ",") + letter.json;
  }
  return fmt::format("{{\"dead_letters\":{},\"dropped\":{},\"entries\":[{}]}}\n", letters.recorded,
                     letters.dropped, entries);
}

int list_dead_letters(const batchd::ClientOptions& options, bool json) {
  batchd::Error error;
  const std::optional<batchd::DeadLetters> letters = batchd::read_dead_letters(options, &error);
  if (!letters) {
    std::cerr << "batchctl: " << error.message << '\n';
    return 1;
  }
  std::cout << (json ? dead_letters_json(*letters) : dead_letters_text(*letters)) << std::flush;
  return 0;
}

// batchctl load/unload NAME: prints the daemon's account once the change is done.
int control(const batchd::ClientOptions& options, const std::string& model, batchd::ModelAction action,
            double timeout_s, bool json) {
  batchd::Error error;
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000));
  const std::optional<std::string> done = batchd::control_model(options, model, action, timeout, &error);
  if (!done) {
    std::cerr << "batchctl: " << error.message << '\n';
    return 1;
  }
  if (json) {
    std::string out = "{\"model\":\"";
    batchd::text::append_json_escaped(model, out);
    out += action == batchd::ModelAction::kLoad ? "\",\"action\":\"load\",\"message\":\"" : "\",\"action\":\"unload\",\"message\":\"";
    batchd::text::append_json_escaped(*done, out);
    std::cout << out << "\"}\n";
  } else {
    std::cout << *done << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path;
  bool json = false;
  double watch_s = 0;
  CLI::App app{"batchctl: the status of a running batchd"};
  app.add_option("--socket", socket_path, "daemon socket (default: the daemon's default path)");
  app.add_flag("--json", json, "one JSON object per report");
  app.add_option("--watch", watch_s, "report again every this many seconds until interrupted");
  CLI::App* dead_letters = app.add_subcommand(
      "dead-letters", "list the requests whose input made the backend fail alone (most recent last)");
  dead_letters->fallthrough();  // --socket and --json may follow the subcommand too
  batchd::top::Options top_options;
  CLI::App* top = app.add_subcommand(
      "top", "a live view that redraws in place (q quits); one plain frame per interval when not a terminal");
  top->fallthrough();
  top->add_option("--interval", top_options.interval_s, "seconds between frames")->capture_default_str();
  top->add_option("--frames", top_options.frames, "stop after this many frames (0: until q or a signal)")
      ->capture_default_str();
  std::string model;
  double control_timeout_s = 60;
  CLI::App* load = app.add_subcommand(
      "load", "load a model the daemon's config declares (after an unload); waits until it serves");
  CLI::App* unload = app.add_subcommand(
      "unload", "unload a model: refuse its new requests, answer those it holds, release its devices");
  for (CLI::App* command : {load, unload}) {
    command->fallthrough();
    command->add_option("model", model, "the model's name")->required();
    command->add_option("--timeout", control_timeout_s, "seconds to wait for the change to be done")
        ->capture_default_str();
  }
  batchd::jobsctl::Options jobs_options;
  CLI::App* jobs = app.add_subcommand(
      "jobs", "the jobs queue in Redis: depth, pending per node, oldest age, redeliveries, dead letters");
  jobs->fallthrough();
  jobs->add_option("--redis", jobs_options.redis_url, "the queue's Redis, as batchd-http's --jobs-redis")->required();
  jobs->add_option("--dead", jobs_options.dead, "list this many of the most recent dead letters")
      ->expected(0, 1)->default_str("20");
  jobs->add_option("--requeue", jobs_options.requeue,
                   "put this dead letter (its id) back in its stream, its job pending again (no deadline)");
  jobs->add_option("--drop", jobs_options.drop, "delete this dead letter (its id)");
  CLI11_PARSE(app, argc, argv);

  if (jobs->parsed()) {
    jobs_options.json = json;
    if (jobs->count("--dead") > 0 && jobs_options.dead < 0) jobs_options.dead = 20;
    return batchd::jobsctl::run(jobs_options);
  }
  batchd::ClientOptions options;
  options.socket_path = socket_path;
  options.connect_timeout = std::chrono::milliseconds(1000);
  if (dead_letters->parsed()) return list_dead_letters(options, json);
  if (load->parsed()) return control(options, model, batchd::ModelAction::kLoad, control_timeout_s, json);
  if (unload->parsed()) return control(options, model, batchd::ModelAction::kUnload, control_timeout_s, json);
  batchd::Error error;
  auto client = batchd::Client::connect(options, &error);
  if (!client) {
    std::cerr << "batchctl: " << error.message << '\n';
    return 1;
  }
  if (top->parsed()) return batchd::top::run(*client, top_options);
  for (;;) {
    const batchd::DaemonStatus status = client->daemon_status();
    std::cout << (json ? as_json(status) + "\n" : as_text(status)) << std::flush;
    if (watch_s <= 0 || !client->connected()) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch_s));
    if (!json) std::cout << '\n';
  }
  return 0;
}

// batchd: flags, logging and signals around the Daemon.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <csignal>
#include <memory>
#include <thread>

#include "daemon/config.hpp"
#include "daemon/backend_factory.hpp"
#include "daemon/daemon.hpp"

namespace {

// "D:V" pairs for the sim fault flags.
template <class V>
std::vector<std::pair<unsigned, V>> parse_pairs(const std::vector<std::string>& items, const char* flag) {
  std::vector<std::pair<unsigned, V>> out;
  for (const auto& item : items) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw std::invalid_argument(std::string(flag) + " expects DEVICE:VALUE, got '" + item + "'");
    }
    out.emplace_back(static_cast<unsigned>(std::stoul(item.substr(0, colon))),
                     static_cast<V>(std::stod(item.substr(colon + 1))));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  batchd::DaemonConfig config;
  double max_wait_ms = 50.0;
  std::string log_level = "info";
  config.cpu_threads = std::max(1U, std::thread::hardware_concurrency());

  CLI::App app{"batchd: batches single string requests from local processes onto a backend"};
  app.add_option("--socket", config.socket_path,
                 "control socket path (default: $XDG_RUNTIME_DIR/batchd/batchd.sock, or "
                 "/run/batchd/batchd.sock as root)");
  config.backend = "auto";
  app.add_option("--backend", config.backend,
                 "auto (cuda if a GPU is visible, else cpu), cpu, sim, cuda, or plugin:PATH")
      ->capture_default_str();
  app.add_option("--devices", config.cuda_devices, "cuda devices to use (default: all visible)")
      ->delimiter(',');
  app.add_option("--streams-per-device", config.streams_per_device, "cuda streams per device")
      ->capture_default_str()->check(CLI::Range(1U, 16U));
  app.add_option("--plugin-config", config.plugin_config, "string passed to a plug-in's init");
  std::int64_t device_timeout_ms = config.routing.device_timeout.count();
  app.add_option("--device-timeout-ms", device_timeout_ms,
                 "a batch running longer marks its device unhealthy")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  auto* sim = app.add_option_group("sim backend", "simulated GPUs for tests and benchmarks");
  std::vector<std::string> fail_every, slow;
  sim->add_option("--sim-devices", config.sim.devices, "simulated devices")->capture_default_str();
  sim->add_option("--sim-fixed-us", config.sim.fixed_us, "cost per batch")->capture_default_str();
  sim->add_option("--sim-per-item-us", config.sim.per_item_us, "cost per request")->capture_default_str();
  sim->add_option("--sim-per-byte-ns", config.sim.per_byte_ns, "cost per input byte")->capture_default_str();
  sim->add_option("--sim-repeat", config.sim.repeat, "answer = input reversed, repeated this often")
      ->capture_default_str()->check(CLI::Range(1U, 64U));
  sim->add_option("--sim-fail-every", fail_every, "DEVICE:K: that device fails every K-th batch");
  sim->add_option("--sim-slow", slow, "DEVICE:FACTOR: that device's costs times FACTOR");
  sim->add_option("--sim-hang", config.sim.hang_devices, "DEVICE: every batch there hangs");
  sim->add_option("--sim-hang-ms", config.sim.hang_ms, "how long a hang lasts")->capture_default_str();
  sim->add_option("--sim-poison", config.sim.poison_prefix,
                  "an input starting with this fails its whole batch");
  sim->add_option("--sim-outage-ms", config.sim.outage_ms,
                  "every device fails for this long after start")->capture_default_str();
  app.add_option("--max-batch", config.batch.max_batch, "flush a batch at this many requests")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--max-wait-ms", max_wait_ms,
                 "flush a batch when its oldest request has waited this long (fractional; 0: at once)")
      ->capture_default_str()->check(CLI::Range(0.0, 60'000.0));
  app.add_option("--max-batch-bytes", config.batch.max_batch_bytes,
                 "flush before a batch's inputs would exceed this many bytes")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 34));
  app.add_option("--cost", config.cost, "SHA-256 rounds per input (cpu backend)")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--cpu-threads", config.cpu_threads, "cpu backend worker threads")
      ->capture_default_str()->check(CLI::Range(1U, 1024U));
  app.add_option("--slots-per-client", config.segment.slot_count,
                 "requests one client may have in flight (power of two)")->capture_default_str();
  app.add_option("--max-input-bytes", config.segment.max_input_bytes, "largest accepted input")
      ->capture_default_str();
  app.add_option("--max-output-bytes", config.segment.max_output_bytes, "largest answer")
      ->capture_default_str();
  app.add_option("--max-clients", config.max_clients, "attached clients at most")
      ->capture_default_str();
  app.add_option("--allow-uid", config.allowed_uids, "also accept clients with this uid");
  app.add_option("--allow-gid", config.allowed_gids, "also accept clients with this gid");
  app.add_option("--drain-spin-us", config.drain_spin_us,
                 "busy-poll this long before the drain loop sleeps")->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  config.routing.device_timeout = std::chrono::milliseconds(device_timeout_ms);
  try {
    config.sim.fail_every = parse_pairs<unsigned>(fail_every, "--sim-fail-every");
    config.sim.slow = parse_pairs<double>(slow, "--sim-slow");
  } catch (const std::exception& e) {
    spdlog::critical("batchd: {}", e.what());
    return 2;
  }
  config.batch.max_wait =
      std::chrono::nanoseconds(static_cast<std::int64_t>(max_wait_ms * 1'000'000.0));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Signals are taken by one thread with sigwait, so no handler runs inside the drain loop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    batchd::Daemon daemon(config, batchd::make_backend(config));
    daemon.start();
    std::thread signal_thread([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      spdlog::info("received signal {}", sig);
      daemon.request_stop();
    });
    try {
      daemon.run();
    } catch (...) {
      ::kill(::getpid(), SIGTERM);  // releases the signal thread from sigwait
      signal_thread.join();
      throw;
    }
    // run() returns only after a stop request, which only the signal thread makes.
    signal_thread.join();
  } catch (const std::exception& e) {
    spdlog::critical("batchd: {}", e.what());
    return 1;
  }
  return 0;
}

// batchd: flags, logging and signals around the Daemon.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <csignal>
#include <memory>
#include <thread>

#include "daemon/config.hpp"
#include "daemon/cpu_backend.hpp"
#include "daemon/daemon.hpp"

namespace {

std::unique_ptr<batchd::Backend> make_backend(const batchd::DaemonConfig& config) {
  if (config.backend == "cpu") {
    return std::make_unique<batchd::CpuBackend>(config.cost, config.cpu_threads);
  }
  throw std::invalid_argument("unknown backend '" + config.backend + "' (available: cpu)");
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
  app.add_option("--backend", config.backend, "backend: cpu")->capture_default_str();
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
    batchd::Daemon daemon(config, make_backend(config));
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

// batchd-worker: runs a model out of the daemon's process, for a daemon started with
// --backend workers: any plug-in (--backend plugin:PATH, so every plug-in gains crash isolation)
// or a built-in backend (cpu; cuda --device N: one GPU per worker process, so a sticky CUDA error
// restarts one worker, not the daemon). It re-attaches when the daemon restarts; SIGTERM or
// SIGINT stops it gracefully (its running batches are answered first).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <pthread.h>

#include <csignal>
#include <mutex>
#include <thread>

#include "client_lib/worker.hpp"
#include "daemon/backend_factory.hpp"

namespace {

// Signals are taken on one thread with sigwait: stop() is then called from a thread that may
// lock, never from inside a handler that could interrupt the worker's destruction.
std::mutex g_mu;
batchd::Worker* g_worker = nullptr;  // guarded by g_mu
bool g_stop = false;                 // guarded by g_mu

void take_signals(sigset_t signals) {
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    std::lock_guard lock(g_mu);
    g_stop = true;
    if (g_worker != nullptr) g_worker->stop();
  }
}

bool stop_requested() {
  std::lock_guard lock(g_mu);
  return g_stop;
}

// The model's outputs, copied into the worker's buffer in input order.
void run_on_backend(batchd::Backend& backend, batchd::WorkerBatch& batch) {
  thread_local batchd::BatchOutput out;
  out.clear();
  const unsigned devices = std::max(1U, backend.devices());
  const unsigned streams = std::max(1U, backend.streams_per_device());
  const batchd::LaneId lane{batch.lane() % devices, (batch.lane() / devices) % streams};
  const batchd::BackendStatus status =
      backend.run(lane, batchd::BatchInput{batch.input_bytes(), batch.input_offsets()}, out);
  if (!status.ok) throw std::runtime_error(status.message);
  if (out.size() != batch.size()) {
    throw std::runtime_error(fmt::format("the {} backend returned {} outputs for {} inputs", backend.name(),
                                         out.size(), batch.size()));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!batch.append(out.at(i))) return;  // the batch fails with the reason append saw
  }
}

}  // namespace

int main(int argc, char** argv) {
  batchd::WorkerOptions options;
  batchd::DaemonConfig config;
  config.backend = "cpu";
  std::string plugin;
  int device = 0;
  std::uint32_t spin_us = 50;
  std::string log_level = "info";
  bool once = false;
  CLI::App app{"batchd-worker: run a model for a batchd daemon started with --backend workers"};
  app.add_option("--socket", options.socket_path, "daemon socket (default: as a client's)");
  app.add_option("--backend", config.backend, "cpu, cuda, sim, or plugin:PATH")->capture_default_str();
  app.add_option("--plugin", plugin, "a plug-in library (the same as --backend plugin:PATH)");
  app.add_option("--plugin-config", config.plugin_config, "string passed to the plug-in's init");
  app.add_option("--device", device, "cuda: the GPU this worker runs on")->capture_default_str();
  app.add_option("--cost", config.cost, "SHA-256 rounds per input (cpu, cuda)")->capture_default_str();
  app.add_option("--sim-fixed-us", config.sim.fixed_us, "sim: cost per batch")->capture_default_str();
  app.add_option("--sim-per-item-us", config.sim.per_item_us, "sim: cost per input")->capture_default_str();
  app.add_option("--concurrency", options.concurrency, "batches run at once")
      ->capture_default_str()->check(CLI::Range(1U, 16U));
  auto* name = app.add_option("--name", options.name,
                              "the model served, by name, shown in the daemon's logs and status (default: the "
                              "backend's; a daemon whose default model runs in workers takes any name)");
  app.add_option("--model", options.name, "the same as --name: the model this worker serves")->excludes(name);
  app.add_option("--version", options.version, "version shown with the name")->capture_default_str();
  app.add_option("--max-inputs", options.max_inputs, "largest batch taken: inputs")->capture_default_str();
  app.add_option("--max-bytes", options.max_bytes, "largest batch taken: input bytes")->capture_default_str();
  app.add_option("--spin-us", spin_us, "spin this long for the next batch before sleeping")->capture_default_str();
  app.add_flag("--once", once, "exit when the daemon goes away instead of waiting for it to come back");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!plugin.empty()) config.backend = "plugin:" + plugin;
  config.cpu_threads = options.concurrency;
  config.cuda_devices = {device};
  config.streams_per_device = options.concurrency;
  config.sim.devices = options.concurrency;
  options.spin = std::chrono::microseconds(spin_us);

  auto backend = batchd::make_backend(config);
  if (!backend) {
    spdlog::error("batchd-worker: {}", backend.error().message);
    return 1;
  }
  if (app.count("--name") + app.count("--model") == 0) options.name = std::string((*backend)->name());
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread(take_signals, signals).detach();
  while (!stop_requested()) {
    batchd::Error error;
    auto worker = batchd::Worker::connect(options, &error);
    if (!worker) {
      const bool transient = error.code == batchd::ErrorCode::kDaemonUnavailable;
      if (!transient || once) {
        spdlog::error("batchd-worker: {}", error.message);
        return 1;
      }
      spdlog::warn("batchd-worker: {}; retrying", error.message);
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    spdlog::info("batchd-worker: attached as worker {} ({} lanes, batches up to {} inputs)", worker->worker_id(),
                 worker->concurrency(), worker->max_inputs());
    {
      std::lock_guard lock(g_mu);
      g_worker = worker.get();
      if (g_stop) worker->stop();  // a signal that came while attaching
    }
    const batchd::WorkerEnd end =
        worker->serve([&](batchd::WorkerBatch& batch) { run_on_backend(**backend, batch); });
    {
      std::lock_guard lock(g_mu);
      g_worker = nullptr;
    }
    if (end == batchd::WorkerEnd::kStopped) break;
    spdlog::warn("batchd-worker: the daemon went away");
    if (once) return 75;
  }
  (*backend)->shutdown();
  return 0;
}

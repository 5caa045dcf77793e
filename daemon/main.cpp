// batchd: options, logging, signals and the service manager around the Daemon.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <memory>
#include <thread>

#include "daemon/backend_factory.hpp"
#include "daemon/daemon.hpp"
#include "daemon/options.hpp"

namespace {

// SIGHUP: re-read the config file. The daemon applies it on its drain loop: every model's batching
// limits, models added (loaded) and dropped (unloaded, then removed); a model's other settings at
// its next load. A config that does not parse changes nothing.
void reload(const std::vector<std::string>& args, batchd::Daemon& daemon) {
  batchd::DaemonOptions fresh;
  std::string message;
  if (batchd::parse_daemon_options(args, fresh, message) != -1) {
    spdlog::error("reload refused, keeping the running configuration: {}", message);
    return;
  }
  daemon.reload(fresh.config);
}

// Takes signals on one thread with sigwait, so no handler ever runs inside the drain loop.
void handle_signals(const sigset_t& signals, const std::vector<std::string>& args, batchd::Daemon& daemon) {
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      sd_notify(0, "RELOADING=1");
      reload(args, daemon);
      sd_notify(0, "READY=1");
      continue;
    }
    spdlog::info("received signal {}: finishing in-flight requests", sig);
    sd_notify(0, "STOPPING=1");
    daemon.request_stop();
    return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  batchd::DaemonOptions options;
  std::string message;
  if (const int code = batchd::parse_daemon_options(args, options, message); code != -1) {
    (code == 0 ? std::cout : std::cerr) << message << '\n';
    return code;
  }
  // Diagnostics go to stderr, where a failed start's reason is looked for (journald reads both).
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::from_str(options.log_level));

  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    // Start-up: value() throws a backend that cannot be made, with the reason, to the catch below.
    std::vector<std::unique_ptr<batchd::Backend>> backends;
    backends.push_back(batchd::make_backend(options.config).value());
    for (const batchd::ModelConfig& model : options.config.models) {
      auto backend = batchd::make_backend(model.settings);
      if (!backend) throw std::runtime_error("model " + model.name + ": " + backend.error().message);
      backends.push_back(std::move(*backend));
    }
    batchd::Daemon daemon(options.config, std::move(backends));
    // Model control's loads make a backend as the start did.
    daemon.set_model_loader([](const batchd::ModelConfig& model) { return batchd::make_backend(model.settings); });
    daemon.start();
    std::uint64_t watchdog_usec = 0;
    if (sd_watchdog_enabled(0, &watchdog_usec) > 0) {
      // Pinged from the drain loop itself: a hung loop stops the pings and systemd restarts us.
      daemon.set_watchdog(std::chrono::microseconds(watchdog_usec / 2),
                          [] { sd_notify(0, "WATCHDOG=1"); });
    }
    sd_notifyf(0, "READY=1\nSTATUS=serving on %s\nMAINPID=%d", daemon.socket_path().c_str(),
               static_cast<int>(::getpid()));
    std::thread signal_thread([&] { handle_signals(signals, args, daemon); });
    try {
      daemon.run();
    } catch (...) {
      ::kill(::getpid(), SIGTERM);  // releases the signal thread from sigwait
      signal_thread.join();
      throw;
    }
    if (daemon.all_devices_lost()) {
      // run() gave up on its own: release the signal thread from sigwait, then ask for a restart.
      ::kill(::getpid(), SIGTERM);
      signal_thread.join();
      return batchd::kExitAllDevicesLost;
    }
    // Otherwise run() returned after a stop request, which only the signal thread makes.
    signal_thread.join();
  } catch (const std::exception& e) {
    spdlog::critical("batchd: {}", e.what());
    return 1;
  }
  return 0;
}

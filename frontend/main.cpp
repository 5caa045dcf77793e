// batchd-http: the HTTP/1.1 front-end. Turns synchronous HTTP requests into asynchronous requests
// to the local batchd daemon, on N io_uring event loops that share one port (SO_REUSEPORT), each
// with its own client of the daemon. SIGTERM or SIGINT: stop accepting, finish what is in flight,
// exit 0.
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "frontend/event_loop.hpp"
#include "frontend/grant_flags.hpp"
#include "frontend/io_uring_probe.hpp"
#include "frontend/jobs_service.hpp"
#include "frontend/listener.hpp"
#include "frontend/metrics.hpp"
#include "frontend/options.hpp"
#include "oip/overload_flag.hpp"

namespace {

using batchd::http::FrontendOptions;

void add_flags(CLI::App& app, FrontendOptions& o, std::string& io_mode, std::string& log_level) {
  // A flag given twice takes the last value, so a wrapper's defaults can be overridden.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--listen", o.listen, "ADDR:PORT to serve HTTP on ([ADDR]:PORT for IPv6; port 0: any free one)")
      ->capture_default_str();
  app.add_option("--socket", o.socket_path, "the daemon's control socket (default: the daemon's default path)");
  app.add_flag("--model-control", o.model_control,
               "serve POST /v2/repository/models/NAME/load and /unload (Triton's explicit model control): "
               "anyone who reaches this port may then unload a model");
  app.add_option("--workers", o.workers, "event loops sharing the port, each with its own daemon client")
      ->capture_default_str()->check(CLI::Range(1U, 256U));
  app.add_option("--port-file", o.port_file, "write the bound port here once listening (for --listen ...:0)");
  app.add_option("--io-mode", io_mode, "auto (multishot io_uring where the kernel has it) or basic (single-shot)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "basic"}));
  app.add_option("--max-header-bytes", o.max_header_bytes, "largest request header (431 beyond)")
      ->capture_default_str()->check(CLI::Range(256U, 1U << 20));
  app.add_option("--max-body-bytes", o.max_body_bytes, "largest request body (413 beyond)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30));
  app.add_option("--max-connections", o.max_connections, "open connections at most, for the whole process")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 22));
  app.add_option("--max-pipelined", o.max_pipelined, "unanswered requests per connection before it is not read")
      ->capture_default_str()->check(CLI::Range(1U, 65536U));
  app.add_option("--idle-timeout-ms", o.idle_timeout_ms, "close a quiet keep-alive connection or a stalled reader")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{86'400'000}));
  app.add_option("--header-timeout-ms", o.header_timeout_ms, "a request's header must arrive within this (408)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--body-timeout-ms", o.body_timeout_ms, "a whole request must arrive within this (408)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--timeout-ms", o.default_timeout_ms, "a request's deadline without X-Timeout-Ms (504 after)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--max-timeout-ms", o.max_timeout_ms, "X-Timeout-Ms is capped to this")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--ready-max-queue", o.ready_max_queue, "/readyz fails while the daemon's queue is this deep")
      ->capture_default_str();
  batchd::oip::add_overload_status_flag(app, o.overload_status);
  batchd::tracing::add_trace_flags(app, o.tracing);
  app.add_option("--drain-timeout-ms", o.drain_timeout_ms,
                 "on SIGTERM, wait at most this long for answers owed (0: --max-timeout-ms + 1 s)")
      ->capture_default_str();
  app.add_option("--drain-delay-ms", o.drain_delay_ms,
                 "on SIGTERM, keep serving this long with /readyz failing before closing the listener "
                 "(a load balancer's health-check interval x its fall count; a second signal cuts it short)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{0}, std::int64_t{600'000}));
  app.add_option("--jobs-ttl-s", o.jobs_ttl_s, "keep a finished job's result this long (seconds)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{30} * 86'400));
  app.add_option("--jobs-max", o.jobs_max,
                 "job records the embedded store holds at most (pending and finished)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  app.add_option("--jobs-max-bytes", o.jobs_max_bytes, "bytes of job records the embedded store holds at most")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1} << 10, std::uint64_t{1} << 40));
  app.add_option("--jobs-max-inputs", o.jobs_max_inputs, "inputs one job may hold")
      ->capture_default_str()->check(CLI::Range(1U, 65536U));
  app.add_option("--max-infer-strings", o.max_infer_strings,
                 "strings one Open Inference Protocol request may carry (the model's max_batch_size)")
      ->capture_default_str()->check(CLI::Range(1U, 65536U));
  app.add_option("--jobs-redis", o.jobs_redis,
                 "queue jobs in Redis (redis://HOST[:PORT][/DB]), which every node consumes and any node answers polls from");
  app.add_option("--jobs-queue-max", o.jobs_queue_max,
                 "unanswered jobs a model's queue of one class holds; more are refused (503)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  app.add_option("--jobs-deadline-s", o.jobs_deadline_s,
                 "a queued job not started within this long ends expired (unless it names its own)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{30} * 86'400));
  app.add_option("--jobs-max-deadline-s", o.jobs_max_deadline_s, "the longest deadline a job may name (deadline_s)")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{30} * 86'400));
  app.add_option("--jobs-claim-idle-ms", o.jobs_claim_idle_ms,
                 "a job left this long by the node that took it (dead or stuck) is taken over")
      ->capture_default_str()->check(CLI::Range(std::int64_t{100}, std::int64_t{3'600'000}));
  app.add_option("--jobs-max-deliveries", o.jobs_max_deliveries,
                 "a job delivered more often than this is dead-lettered and fails")
      ->capture_default_str()->check(CLI::Range(1U, 1000U));
  app.add_option("--jobs-inputs-in-flight", o.jobs_inputs_in_flight,
                 "the most queued jobs' inputs this node runs at once (also at most half its slots)")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--jobs-results-stream", o.jobs_results_streams,
                 "with --jobs-redis: also publish this model's job answers on batchd:results:MODEL (* for every "
                 "model; repeatable)");
  app.add_option("--jobs-results-max", o.jobs_results_max, "entries a results stream keeps, about (older ones trimmed)")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
}

batchd::http::JobsOptions jobs_options(const FrontendOptions& options) {
  batchd::http::JobsOptions jobs;
  jobs.ttl = std::chrono::seconds(options.jobs_ttl_s);
  jobs.limits.max_jobs = options.jobs_max;
  jobs.limits.max_bytes = options.jobs_max_bytes;
  jobs.max_inputs = options.jobs_max_inputs;
  jobs.redis_url = options.jobs_redis;
  jobs.queue_max = options.jobs_queue_max;
  jobs.default_deadline = std::chrono::seconds(std::min(options.jobs_deadline_s, options.jobs_max_deadline_s));
  jobs.max_deadline = std::chrono::seconds(options.jobs_max_deadline_s);
  jobs.claim_idle = std::chrono::milliseconds(options.jobs_claim_idle_ms);
  jobs.max_deliveries = options.jobs_max_deliveries;
  jobs.inputs_in_flight = options.jobs_inputs_in_flight;
  jobs.default_timeout = std::chrono::milliseconds(options.default_timeout_ms);
  jobs.max_timeout = std::chrono::milliseconds(options.max_timeout_ms);
  jobs.socket_path = options.socket_path;
  jobs.results_models = options.jobs_results_streams;
  jobs.results_kept = options.jobs_results_max;
  return jobs;
}

// Runs one loop per listener until a signal; returns the exit code.
int run_workers(const FrontendOptions& options, const batchd::http::UringFeatures& features,
                const batchd::grants::GrantPolicy& grants, const std::vector<int>& listeners,
                const sigset_t& signals) {
  batchd::http::MetricsRegistry metrics(options.workers);
  std::atomic<bool> stop{false};
  std::atomic<bool> leaving{false};
  std::atomic<bool> failed{false};
  std::vector<int> wake_fds;
  for (unsigned i = 0; i < options.workers; ++i) wake_fds.push_back(::eventfd(0, EFD_CLOEXEC));
  // Made before the loops and dropped after them, but before the eventfds it writes are closed.
  auto jobs = std::make_unique<batchd::http::JobsService>(jobs_options(options), wake_fds);
  // After the jobs' inboxes, which its answers go through, and dropped before them.
  std::unique_ptr<batchd::ModelControlQueue> model_control;
  if (options.model_control) {
    batchd::ClientOptions client;
    client.socket_path = options.socket_path;
    model_control = std::make_unique<batchd::ModelControlQueue>(client, std::chrono::milliseconds(options.max_timeout_ms));
  }
  // Before the loops, which hand it spans until they end; it flushes what is queued last.
  const std::unique_ptr<batchd::tracing::DoorTracer> tracer = batchd::tracing::open_door_tracer(options.tracing, "batchd-http");
  if (tracer) {
    spdlog::info("batchd-http: tracing: spans to {} over OTLP {}; 1 in {} of the requests without a sampled context",
                 options.tracing.endpoint, options.tracing.protocol, options.tracing.rate);
  }
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < options.workers; ++i) {
    threads.emplace_back([&, i] {
      try {
        batchd::http::EventLoop loop(
            {i, listeners[i], wake_fds[i], &stop, &leaving, &options, &features, &metrics, jobs.get(), &grants,
             model_control.get(), tracer.get()});
        loop.run();
      } catch (const std::exception& e) {
        spdlog::critical("batchd-http: worker {}: {}", i, e.what());
        failed.store(true);
        ::kill(::getpid(), SIGTERM);  // releases the main thread from sigwait: all stop
      }
    });
  }
  int sig = 0;
  sigwait(&signals, &sig);
  leaving.store(true, std::memory_order_release);
  if (options.drain_delay_ms > 0 && !failed.load()) {
    spdlog::info("batchd-http: signal {}: /readyz fails from now; serving on for {} ms", sig, options.drain_delay_ms);
    const timespec delay{static_cast<time_t>(options.drain_delay_ms / 1000),
                         static_cast<long>(options.drain_delay_ms % 1000) * 1'000'000};
    // A second signal (an impatient operator, systemd's stop timeout) ends the delay at once.
    if (sigtimedwait(&signals, nullptr, &delay) > 0) spdlog::info("batchd-http: second signal: delay cut short");
  }
  spdlog::info("batchd-http: signal {}: no new connections; finishing the requests in flight", sig);
  stop.store(true, std::memory_order_release);
  for (const int fd : wake_fds) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof(one));
  }
  for (auto& t : threads) t.join();
  // The queue's jobs this node holds are answered within the drain, or left for another node.
  jobs->stop_consumer(std::chrono::milliseconds(options.drain_timeout_ms > 0 ? options.drain_timeout_ms
                                                                             : options.max_timeout_ms + 1000));
  model_control.reset();
  jobs.reset();
  for (const int fd : wake_fds) ::close(fd);
  return failed.load() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  FrontendOptions options;
  options.workers = std::clamp(std::thread::hardware_concurrency(), 1U, 64U);
  std::string io_mode = "auto";
  std::string log_level = "info";
  batchd::grants::GrantFlags grant_flags;
  CLI::App app{"batchd-http: HTTP/1.1 front-end for the batchd batching daemon"};
  add_flags(app, options, io_mode, log_level);
  batchd::grants::add_grant_flags(app, grant_flags, batchd::grants::kGrantHeader);
  CLI11_PARSE(app, argc, argv);
  try {
    batchd::tracing::finish_trace_options(options.tracing);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "batchd-http: %s\n", e.what());
    return 2;
  }
  options.io_mode = io_mode == "basic" ? batchd::http::IoMode::kBasic : batchd::http::IoMode::kAuto;
  // Diagnostics go to stderr, as batchd's do (journald reads both; a failed start is looked for there).
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Signals are taken by the main thread with sigwait; the loops and their helper threads
  // inherit the blocked mask, so no handler ever interrupts a loop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    const batchd::http::ListenAddress address = batchd::parse_listen_address(options.listen, "--listen").value();
    const batchd::grants::GrantPolicy grants = batchd::grants::make_grant_policy(grant_flags, "batchd-http");
    const batchd::http::UringFeatures features = batchd::http::probe_uring_features();
    if (!features.basic_ops) {
      spdlog::critical("batchd-http: this kernel's io_uring lacks basic operations (Linux 5.6 or later needed)");
      return 1;
    }
    std::uint16_t port = 0;
    const std::vector<int> listeners = batchd::http::open_listeners(address, options.workers, &port);
    spdlog::info("batchd-http: listening on {} (port {}) with {} workers; io_uring: {}{}", options.listen, port,
                 options.workers, features.describe(), options.io_mode == batchd::http::IoMode::kBasic ? " (basic mode forced)" : "");
    if (!options.port_file.empty()) batchd::write_port_file(options.port_file, port);
    return run_workers(options, features, grants, listeners, signals);
  } catch (const std::exception& e) {
    spdlog::critical("batchd-http: {}", e.what());
    return 1;
  }
}

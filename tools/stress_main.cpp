// batchd-stress: loads a batchd daemon through the client library (or an HTTP front-end with
// --http, a gRPC front-end with --grpc), checks every answer against the local reference and
// reports throughput, errors by kind and latency percentiles.
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <optional>
#include <vector>

#include "client_lib/client.hpp"
#include "tools/stress_clock.hpp"
#include "tools/stress_grpc_transport.hpp"
#include "tools/stress_http_transport.hpp"
#include "tools/stress_inputs.hpp"
#include "tools/stress_jobs_transport.hpp"
#include "tools/stress_loops.hpp"
#include "tools/stress_options.hpp"
#include "tools/stress_csv.hpp"
#include "tools/stress_progress.hpp"
#include "tools/stress_report.hpp"
#include "tools/stress_shm_transport.hpp"

namespace {

constexpr int kExitFailures = 1;
constexpr int kExitConnect = 2;

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

// The first Ctrl-C ends the run early but still prints the summary; SA_RESETHAND makes a
// second one kill the process as usual.
void on_interrupt(int) { g_interrupted.store(true, std::memory_order_relaxed); }

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// Settings that cannot work against this daemon produce nothing but errors; say so up front.
void warn_about_limits(const batchd::Client& client, const batchd::stress::Options& options) {
  if (options.max_input_bytes > client.max_input_bytes()) {
    fmt::print(stderr, "batchd-stress: warning: inputs up to {} bytes exceed the daemon's limit of "
                       "{}; those will fail as too_large\n",
               options.max_input_bytes, client.max_input_bytes());
  }
  if (options.mode == batchd::stress::Mode::kClosed && options.threads > client.slot_count()) {
    fmt::print(stderr, "batchd-stress: warning: {} threads exceed the client's {} request slots; "
                       "expect overloaded errors\n",
               options.threads, client.slot_count());
  }
}

std::unique_ptr<batchd::Client> connect(const batchd::stress::Options& options) {
  batchd::ClientOptions client_options;
  client_options.socket_path = options.socket_path;
  client_options.connect_timeout = options.connect_timeout;
  batchd::Error error{batchd::ErrorCode::kDaemonUnavailable, "unknown reason"};
  auto client = batchd::Client::connect(client_options, &error);
  if (!client) {
    fmt::print(stderr, "batchd-stress: cannot connect ({}): {}\n",
               batchd::error_code_name(error.code), error.message);
  }
  return client;
}

// Runs the loop the options ask for over `transport`, with the live progress line on stderr
// when a person is watching.
std::optional<batchd::stress::RunResult> run_loop(const batchd::stress::Options& options,
                                   const batchd::stress::InputPool& inputs,
                                   batchd::stress::LiveStats& live,
                                   batchd::stress::Transport& transport) {
  using namespace batchd::stress;
  const bool show_progress = !options.quiet && ::isatty(STDERR_FILENO) == 1;
  std::optional<Progress> progress;
  const std::int64_t start_ns = now_ns();
  if (show_progress) progress.emplace(live, start_ns);
  std::unique_ptr<CsvLog> csv;
  if (!options.csv_path.empty()) {
    batchd::Expected<std::unique_ptr<CsvLog>> opened = CsvLog::open(options.csv_path, live, start_ns);
    if (!opened) {
      fmt::print(stderr, "batchd-stress: {}\n", opened.error().message);
      return std::nullopt;
    }
    csv = std::move(*opened);
  }
  RunContext ctx{options, inputs, live, g_interrupted};
  RunResult result = options.mode == Mode::kOpen ? run_open_loop(ctx, transport)
                                                 : run_closed_loop(ctx, transport);
  if (progress) progress->stop();
  if (csv) csv->stop();
  return result;
}

batchd::stress::InputPool make_inputs(const batchd::stress::Options& options) {
  if (!options.replay.empty()) return batchd::stress::InputPool(options.replay);
  return batchd::stress::InputPool(options.min_input_bytes, options.max_input_bytes, options.seed);
}

// Over shared memory; nothing when the daemon cannot be reached.
std::optional<batchd::stress::RunResult> run_shm(const batchd::stress::Options& options,
                                                 batchd::stress::LiveStats& live) {
  using namespace batchd::stress;
  const std::unique_ptr<batchd::Client> client = connect(options);
  if (!client) return std::nullopt;
  warn_about_limits(*client, options);
  const InputPool inputs = make_inputs(options);
  const std::unique_ptr<Transport> transport = make_shm_transport(*client, options, inputs);
  return run_loop(options, inputs, live, *transport);
}

// Over HTTP; nothing when the front-end cannot be reached. All connections are opened first,
// so connecting is not charged to the first requests' latency.
std::optional<batchd::stress::RunResult> run_http(const batchd::stress::Options& options,
                                                  batchd::stress::LiveStats& live) {
  using namespace batchd::stress;
  const http::Url url = http::parse_url(options.http_url, options.http_api).value();  // checked by parse_options
  const auto unreachable = [](const batchd::Failure& failure) {
    fmt::print(stderr, "batchd-stress: {}\n", failure.message);
    return std::nullopt;
  };
  const batchd::Expected<http::Endpoint> endpoint = http::resolve(url);
  if (!endpoint) return unreachable(endpoint.error());
  batchd::Expected<std::vector<int>> fds =
      http::connect_all(*endpoint, options.connections, options.connect_timeout);
  if (!fds) return unreachable(fds.error());
  const InputPool inputs = make_inputs(options);
  const HttpTarget target{url, *endpoint, options, inputs};
  const std::unique_ptr<Transport> transport = options.http_api == http::Api::kJobs
                                                   ? make_jobs_transport(target, std::move(*fds))
                                                   : make_http_transport(target, std::move(*fds));
  return run_loop(options, inputs, live, *transport);
}

// Over gRPC; nothing when the front-end cannot be reached. All channels are connected first.
std::optional<batchd::stress::RunResult> run_grpc(const batchd::stress::Options& options,
                                                  batchd::stress::LiveStats& live) {
  using namespace batchd::stress;
  const InputPool inputs = make_inputs(options);
  batchd::Expected<std::unique_ptr<Transport>> transport = make_grpc_transport(options, inputs);
  if (!transport) {
    fmt::print(stderr, "batchd-stress: {}\n", transport.error().message);
    return std::nullopt;
  }
  return run_loop(options, inputs, live, **transport);
}

std::optional<batchd::stress::RunResult> run(const batchd::stress::Options& options,
                                             batchd::stress::LiveStats& live) {
  switch (options.transport) {
    case batchd::stress::TransportKind::kHttp: return run_http(options, live);
    case batchd::stress::TransportKind::kGrpc: return run_grpc(options, live);
    case batchd::stress::TransportKind::kShm: break;
  }
  return run_shm(options, live);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace batchd::stress;
  int exit_code = 0;
  const std::optional<Options> options = parse_options(argc, argv, exit_code);
  if (!options) return exit_code;
  // Before connecting, so an early Ctrl-C still ends the run gracefully rather than being lost.
  install_interrupt_handler();
  LiveStats live;
  std::optional<RunResult> result = run(*options, live);
  if (!result) return kExitConnect;
  const Summary summary = summarize(*result);
  print_text(stdout, summary, *options);
  if (options->json) print_json(stdout, summary, *options);
  std::fflush(stdout);
  return summary.errors == 0 && summary.wrong == 0 ? 0 : kExitFailures;
}

// batchd-grpc: the Open Inference Protocol over gRPC (inference.GRPCInferenceService), for the
// field's clients (tritonclient.grpc, perf_analyzer -i grpc, KServe's SDK). A process of its own
// beside batchd-http rather than a listener inside it: gRPC brings its own threads and event
// engine, which batchd-http's io_uring loops would have to share; apart, each is hardened, sized
// and restarted on its own, and a fault in one protocol's stack costs only its own clients.
// SIGTERM or SIGINT: ServerReady fails, no new RPCs, those in flight finish (up to the drain
// timeout), exit 0.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "status/metrics_listener.hpp"
#include "frontend/grant_flags.hpp"
#include "grpc_frontend/daemon_pool.hpp"
#include "grpc_frontend/metrics.hpp"
#include "grpc_frontend/options.hpp"
#include "grpc_frontend/service.hpp"
#include "oip/overload_flag.hpp"
#include "text/listen_address.hpp"

namespace {

using batchd::grpcfront::GrpcOptions;

void add_flags(CLI::App& app, GrpcOptions& o, std::string& log_level) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--listen", o.listen, "ADDR:PORT to serve gRPC on ([ADDR]:PORT for IPv6; port 0: any free one)")
      ->capture_default_str();
  app.add_option("--socket", o.socket_path, "the daemon's control socket (default: the daemon's default path)");
  app.add_flag("--model-control", o.model_control,
               "serve RepositoryModelLoad and RepositoryModelUnload (Triton's explicit model control): anyone "
               "who reaches this port may then unload a model");
  app.add_option("--clients", o.clients, "daemon clients, each with its own polling thread")
      ->capture_default_str()->check(CLI::Range(1U, 64U));
  app.add_option("--port-file", o.port_file, "write the bound port here once listening (for --listen ...:0)");
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate chain: serve TLS only (with --tls-key)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", o.tls_key, "PEM private key for --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--timeout-ms", o.default_timeout_ms,
                 "an inference's deadline when the call has neither a deadline nor a timeout parameter")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--max-timeout-ms", o.max_timeout_ms, "deadlines and timeout parameters are capped to this")
      ->capture_default_str()->check(CLI::Range(std::int64_t{1}, std::int64_t{3'600'000}));
  app.add_option("--max-infer-strings", o.max_infer_strings, "strings one inference may carry (max_batch_size)")
      ->capture_default_str()->check(CLI::Range(1U, 65536U));
  app.add_option("--max-message-bytes", o.max_message_bytes, "largest request message (RESOURCE_EXHAUSTED beyond)")
      ->capture_default_str()->check(CLI::Range(1U << 10, 1U << 30));
  app.add_option("--max-stream-in-flight", o.max_stream_in_flight,
                 "requests a stream may have unanswered or unsent before it is not read")
      ->capture_default_str()->check(CLI::Range(1U, 65536U));
  app.add_option("--max-stream-queued-bytes", o.max_stream_queued_bytes,
                 "bytes of answers a stream may have waiting to be written before it is not read")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{1} << 16, std::uint64_t{1} << 34));
  app.add_option("--write-timeout-ms", o.write_timeout_ms,
                 "cancel a stream whose client does not take an answer within this long")
      ->capture_default_str()->check(CLI::Range(std::int64_t{10}, std::int64_t{3'600'000}));
  app.add_option("--max-calls", o.max_calls, "inference calls and streams open at once (--overload-status beyond)")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--max-streams-per-connection", o.max_streams_per_connection,
                 "HTTP/2 streams (calls) one client connection may have open at once")
      ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--max-memory-bytes", o.max_memory_bytes, "memory gRPC may use for all connections' buffers")
      ->capture_default_str()->check(CLI::Range(std::uint64_t{16} << 20, std::uint64_t{1} << 40));
  app.add_option("--ready-max-queue", o.ready_max_queue, "ServerReady fails while the daemon's queue is this deep")
      ->capture_default_str();
  batchd::oip::add_overload_status_flag(app, o.overload_status);
  batchd::tracing::add_trace_flags(app, o.tracing);
  app.add_option("--drain-timeout-ms", o.drain_timeout_ms,
                 "on SIGTERM, wait at most this long for RPCs in flight (0: --max-timeout-ms + 1 s)")
      ->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen,
                 "ADDR:PORT to serve GET /metrics on (Prometheus text: inferences, priority downgrades)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str()->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + path);
  return text.str();
}

std::shared_ptr<grpc::ServerCredentials> credentials(const GrpcOptions& options) {
  if (options.tls_cert.empty() && options.tls_key.empty()) return grpc::InsecureServerCredentials();
  if (options.tls_cert.empty() || options.tls_key.empty()) {
    throw std::runtime_error("--tls-cert and --tls-key go together");
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({read_file(options.tls_key), read_file(options.tls_cert)});
  return grpc::SslServerCredentials(ssl);
}

// Started once the service's counters exist; nothing when --metrics-listen is not given.
std::unique_ptr<batchd::MetricsListener> start_metrics(const GrpcOptions& options,
                                                       const batchd::grpcfront::ServiceContext& context) {
  if (options.metrics_listen.empty()) return nullptr;
  const batchd::ListenAddress address = batchd::parse_listen_address(options.metrics_listen, "--metrics-listen").value();
  auto listener = std::make_unique<batchd::MetricsListener>(
      address, [&context] { return batchd::grpcfront::render_metrics(context); });
  listener->start();
  spdlog::info("batchd-grpc: metrics on {} (port {})", options.metrics_listen, listener->port());
  return listener;
}

int serve(const GrpcOptions& options, batchd::grants::GrantPolicy grants, const sigset_t& signals) {
  batchd::ClientOptions client;
  client.socket_path = options.socket_path;
  client.connect_timeout = std::chrono::milliseconds(500);  // short, so a stop never waits long for it
  batchd::grpcfront::DaemonPool pool(client, options.clients);
  batchd::grpcfront::ServiceContext context;
  context.limits.max_elements = options.max_infer_strings;
  context.limits.default_timeout = std::chrono::milliseconds(options.default_timeout_ms);
  context.limits.max_timeout = std::chrono::milliseconds(options.max_timeout_ms);
  context.max_stream_in_flight = options.max_stream_in_flight;
  context.max_stream_queued_bytes = options.max_stream_queued_bytes;
  context.max_calls = options.max_calls;
  context.overload = options.overload_status;
  // Made before the server, which hands it spans until it stops; it flushes what is queued last.
  const std::unique_ptr<batchd::tracing::DoorTracer> tracer = batchd::tracing::open_door_tracer(options.tracing, "batchd-grpc");
  context.tracer = tracer.get();
  context.ready_max_queue = options.ready_max_queue;
  context.pool = &pool;
  context.grants = std::move(grants);
  std::unique_ptr<batchd::ModelControlQueue> model_control;
  if (options.model_control) {
    batchd::ClientOptions control_client;
    control_client.socket_path = options.socket_path;
    model_control = std::make_unique<batchd::ModelControlQueue>(control_client,
                                                               std::chrono::milliseconds(options.max_timeout_ms));
    context.model_control = model_control.get();
  }
  batchd::grpcfront::StreamWatchdog watchdog(std::chrono::milliseconds(options.write_timeout_ms));
  context.watchdog = &watchdog;
  batchd::grpcfront::InferenceService service(context);
  const std::unique_ptr<batchd::MetricsListener> metrics = start_metrics(options, context);

  // What a peer can make the server hold is bounded: a message by --max-message-bytes, calls by
  // --max-calls (and per connection by --max-streams-per-connection), and gRPC's buffers by a
  // resource quota, past which it refuses new streams rather than grow.
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, credentials(options), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  grpc::ResourceQuota quota("batchd-grpc");
  quota.Resize(options.max_memory_bytes);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(options.max_streams_per_connection));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) throw std::runtime_error("cannot listen on " + options.listen);
  spdlog::info("batchd-grpc: listening on {} (port {}){}", options.listen, port,
               options.tls_cert.empty() ? "" : " with TLS");
  if (!options.port_file.empty()) batchd::write_port_file(options.port_file, static_cast<std::uint16_t>(port));

  int sig = 0;
  sigwait(&signals, &sig);
  context.draining.store(true, std::memory_order_release);
  const std::int64_t drain_ms = options.drain_timeout_ms > 0 ? options.drain_timeout_ms : options.max_timeout_ms + 1000;
  spdlog::info("batchd-grpc: signal {}: no new calls; finishing those in flight (at most {} ms)", sig, drain_ms);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(drain_ms));
  server->Wait();
  model_control.reset();
  pool.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  GrpcOptions options;
  std::string log_level = "info";
  batchd::grants::GrantFlags grant_flags;
  CLI::App app{"batchd-grpc: the Open Inference Protocol over gRPC for the batchd batching daemon"};
  add_flags(app, options, log_level);
  batchd::grants::add_grant_flags(app, grant_flags, "x-batchd-priority-grant");
  CLI11_PARSE(app, argc, argv);
  try {
    batchd::tracing::finish_trace_options(options.tracing);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "batchd-grpc: %s\n", e.what());
    return 2;
  }
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Taken by the main thread with sigwait; gRPC's threads and the pool's inherit the blocked mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return serve(options, batchd::grants::make_grant_policy(grant_flags, "batchd-grpc"), signals);
  } catch (const std::exception& e) {
    spdlog::critical("batchd-grpc: {}", e.what());
    return 1;
  }
}

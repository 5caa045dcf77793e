#include "tools/stress_options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <random>

#include "base/expected.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_input_file.hpp"

namespace batchd::stress {

const char* mode_name(Mode mode) noexcept { return mode == Mode::kOpen ? "open" : "closed"; }

const char* transport_name(TransportKind transport) noexcept {
  switch (transport) {
    case TransportKind::kHttp: return "http";
    case TransportKind::kGrpc: return "grpc";
    case TransportKind::kShm: break;
  }
  return "shm";
}

const char* protocol_name(const Options& options) noexcept {
  switch (options.transport) {
    case TransportKind::kHttp:
      return options.http_api == http::Api::kV2 ? "v2" : options.http_api == http::Api::kJobs ? "jobs" : "v1";
    case TransportKind::kGrpc: return "grpc";
    case TransportKind::kShm: break;
  }
  return "shm";
}

namespace {

constexpr double kDefaultDurationS = 10.0;
// sysexits' EX_USAGE: apart from the run's own 0, 1 and 2 (connect failure).
constexpr int kExitUsage = 64;
// Open loop over HTTP: enough connections that pipelining rarely queues behind a slow answer.
constexpr unsigned kDefaultOpenConnections = 64;

Failure usage(std::string why) { return make_failure(std::errc::invalid_argument, std::move(why)); }

struct InputBytes {
  std::uint32_t min = 0;
  std::uint32_t max = 0;
};

// "MIN:MAX" -> the two bounds; a lone number means a fixed length.
Expected<InputBytes> parse_input_bytes(const std::string& text) {
  const std::size_t colon = text.find(':');
  try {
    std::size_t used = 0;
    const unsigned long lo = std::stoul(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) return usage("expected MIN:MAX");
    unsigned long hi = lo;
    if (colon != std::string::npos) {
      const std::string rest = text.substr(colon + 1);
      hi = std::stoul(rest, &used);
      if (used != rest.size()) return usage("expected MIN:MAX");
    }
    if (lo > hi) return usage("MIN must not exceed MAX");
    if (hi > (1UL << 30)) return usage("MAX is unreasonably large");
    return InputBytes{static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi)};
  } catch (const std::exception&) {
    return usage("expected MIN:MAX with non-negative integers");
  }
}

void add_options(CLI::App& app, Options& o, std::string& input_bytes, std::int64_t& timeout_ms,
                 std::int64_t& connect_ms, std::uint64_t& requests, double& duration) {
  auto* socket = app.add_option("--socket", o.socket_path,
                                 "daemon control socket (default: the client's default)");
  auto* http = app.add_option("--http", o.http_url,
                              "load an HTTP front-end instead, e.g. http://127.0.0.1:8080 (POST "
                              "/v1/batchstring, or /v2/models/batchstring/infer with --protocol v2; "
                              "a URL with a path uses that path)")
                   ->excludes(socket);
  app.add_option("--grpc", o.grpc_target,
                 "load a gRPC front-end instead (batchd-grpc: the Open Inference Protocol's ModelInfer), "
                 "at HOST:PORT; implies --protocol grpc")
      ->excludes(socket)->excludes(http);
  auto* threads = app.add_option("--threads", o.threads, "closed loop: threads each submitting in a loop")
                      ->capture_default_str()->check(CLI::Range(1U, 4096U));
  auto* rate = app.add_option("--rate", o.rate, "open loop: requests per second, paced by intended send time")
                   ->check(CLI::Range(0.001, 1e9))->excludes(threads);
  app.add_option("--shape", o.shape_spec,
                 "open loop whose rate follows a cycle of segments, repeated for the run: RATE:SECONDS holds a "
                 "rate, FROM..TO:SECONDS ramps it, e.g. 60000:0.02,0:0.08 (20 ms bursts at 60,000/s every "
                 "100 ms) or 4000..36000:5,36000..4000:5")
      ->excludes(threads)->excludes(rate);
  app.add_option("--duration", duration, "seconds to run (default 10 unless --requests is given)")
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--warmup", o.warmup_s, "open loop: seconds of load before the measured window, not counted")
      ->check(CLI::Range(0.0, 3600.0))->needs("--duration");
  app.add_option("--cooldown", o.cooldown_s,
                 "open loop: seconds the load goes on after the measured window, not counted")
      ->check(CLI::Range(0.0, 3600.0))->needs("--duration");
  app.add_option("--requests", requests, "total requests at most (either limit may end the run)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 62));
  auto* bytes = app.add_option("--input-bytes", input_bytes, "random input length range in bytes, MIN:MAX")
                    ->capture_default_str();
  app.add_option("--input-file", o.input_file,
                 "replay the inputs in this file, in turn: one per line, or JSON lines {\"input\": ...}")
      ->excludes(bytes);
  auto* cost = app.add_option("--cost", o.cost, "SHA-256 rounds; must match the daemon's --cost")
                   ->capture_default_str()->check(CLI::Range(1U, 1U << 20));
  app.add_option("--expect-sim", o.sim_repeat,
                 "check answers as the sim backend gives them (input reversed, repeated this "
                 "often; the daemon's --sim-repeat) instead of SHA-256")
      ->check(CLI::Range(1U, 1000U))->excludes(cost);
  app.add_option("--timeout-ms", timeout_ms,
                 "per-request timeout (--http: 1 s more unless --http-timeout-ms is shorter, so "
                 "the server's own 504 arrives first; --grpc: the timeout parameter, and the "
                 "deadline 1 s later)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{86'400'000}));
  app.add_option("--connect-timeout-ms", connect_ms, "how long to wait for the daemon")
      ->capture_default_str()->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  app.add_option("--model", o.models,
                 "send to this model by name (repeat it: requests go to each in turn); default: the "
                 "daemon's default model. Shared memory only")
      ->type_name("NAME");
  app.add_option("--seed", o.seed, "seed for the inputs (default: random, printed in the summary)");
  app.add_flag("--json", o.json, "also print the summary as one JSON object on the last stdout line");
  app.add_flag("--quiet", o.quiet, "no live progress line on stderr");
  app.add_option("--csv", o.csv_path,
                 "write one row per second (elapsed_s, sent, ok, errors, wrong, p50_us, p99_us) to this file");
}

void add_priority_options(CLI::App& app, std::string& priority, std::string& mix) {
  auto* one = app.add_option("--priority", priority, "every request's class: high, normal or low")
                  ->default_str("normal");
  app.add_option("--priority-mix", mix,
                 "each request's class drawn by percent from the seed, e.g. high:10,normal:60,low:30 "
                 "(whole percentages adding up to 100)")
      ->excludes(one);
}

// Either flag into the mix, or why it cannot be used.
Expected<PriorityMix> parse_priority_flags(const CLI::App& app, const std::string& priority,
                                           const std::string& mix) {
  if (app.count("--priority-mix") > 0) return PriorityMix::parse(mix);
  if (app.count("--priority") == 0) return PriorityMix{};
  const std::optional<Priority> one = parse_priority(priority);
  if (!one) {
    return usage("--priority: \"" + priority + "\" is not a class; the classes are high, normal and low");
  }
  return PriorityMix::single(*one);
}

// The front-ends' settings: --protocol, and the HTTP and gRPC connections.
void add_front_end_options(CLI::App& app, Options& o, std::int64_t& http_timeout_ms, std::string& protocol) {
  app.add_option("--protocol", protocol,
                 "what the requests speak: v1 (batchd's HTTP API), v2 (the Open Inference Protocol) or "
                 "jobs (each request a job of /v1/jobs, polled until answered) to --http URL, or grpc (the "
                 "Open Inference Protocol over gRPC) to --grpc HOST:PORT")
      ->check(CLI::IsMember({"v1", "v2", "jobs", "grpc"}));
  app.add_option("--connections", o.connections,
                 "--http: keep-alive connections (default: --threads closed loop, 64 open loop); "
                 "--grpc: channels, each its own HTTP/2 connection (default: --threads closed loop, "
                 "--io-threads open loop)")
      ->check(CLI::Range(1U, 65536U));
  app.add_option("--pipeline-depth", o.pipeline_depth,
                 "--http open loop: requests outstanding per connection (HTTP/1.1 pipelining)")
      ->capture_default_str()->check(CLI::Range(1U, 4096U));
  app.add_option("--io-threads", o.io_threads,
                 "open loop: --http: epoll threads; --grpc: completion queues, each with a thread")
      ->capture_default_str()->check(CLI::Range(1U, 256U));
  app.add_option("--http-timeout-ms", http_timeout_ms,
                 "--http: X-Timeout-Ms sent with each request (default: --timeout-ms)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{86'400'000}));
}

// HOST:PORT or [V6]:PORT, with the port given: gRPC would otherwise pick 443.
Expected<void> check_grpc_target(const std::string& target) {
  if (target.find('/') != std::string::npos) return usage("--grpc: expected HOST:PORT, not a URL");
  const Expected<http::Url> parsed = http::parse_url("http://" + target);
  if (!parsed) return usage("--grpc: " + parsed.error().message);
  if (!target.ends_with(":" + parsed->port)) return usage("--grpc: expected HOST:PORT, with the port");
  return {};
}

// The transport and API --protocol, --http and --grpc name together, or why they do not fit.
Expected<void> finish_protocol(const CLI::App& app, Options& o, const std::string& protocol) {
  const bool named = app.count("--protocol") > 0;
  if (!o.grpc_target.empty()) {
    if (named && protocol != "grpc") {
      return usage("--grpc speaks gRPC: it goes with --protocol grpc, not " + protocol +
                   " (which goes to --http URL)");
    }
    o.transport = TransportKind::kGrpc;
    return check_grpc_target(o.grpc_target);
  }
  if (protocol == "grpc") {
    return usage(o.http_url.empty() ? "--protocol grpc needs --grpc HOST:PORT"
                                    : "--protocol grpc goes to --grpc HOST:PORT, not to --http URL");
  }
  if (named && o.http_url.empty()) {
    return usage("--protocol " + protocol + " is spoken over HTTP: it needs --http URL");
  }
  o.http_api = protocol == "v2" ? http::Api::kV2 : protocol == "jobs" ? http::Api::kJobs : http::Api::kV1;
  return {};
}

// gRPC's settings: channels and completion queues, not HTTP/1.1's pipelines; no priority
// classes, which batchd-grpc does not take.
Expected<void> finish_grpc(const CLI::App& app, Options& o) {
  if (app.count("--pipeline-depth") + app.count("--http-timeout-ms") > 0) {
    return usage("--pipeline-depth and --http-timeout-ms are for --http, not --grpc");
  }
  if (app.count("--priority") + app.count("--priority-mix") > 0) {
    return usage("--grpc sends no priority classes (batchd-grpc has none): drop --priority and --priority-mix");
  }
  if (app.count("--connections") == 0) o.connections = o.mode == Mode::kClosed ? o.threads : o.io_threads;
  o.io_threads = std::min(o.io_threads, o.connections);
  o.http_timeout = o.timeout;
  return {};
}

// Fills in the HTTP settings that depend on others, or says why they cannot work.
Expected<void> finish_http(const CLI::App& app, Options& o) {
  const bool http_only = app.count("--connections") + app.count("--pipeline-depth") +
                             app.count("--io-threads") + app.count("--http-timeout-ms") > 0;
  if (o.http_url.empty()) {
    if (http_only) {
      return usage("--connections, --pipeline-depth, --io-threads and --http-timeout-ms need --http (or --grpc)");
    }
    return {};
  }
  if (const auto url = http::parse_url(o.http_url, o.http_api); !url) {
    return usage("--http: " + url.error().message);
  }
  o.transport = TransportKind::kHttp;
  if (app.count("--connections") == 0) {
    o.connections = o.mode == Mode::kClosed ? o.threads : kDefaultOpenConnections;
  }
  // Each closed-loop thread owns its connections, so there must be one at least per thread.
  if (o.mode == Mode::kClosed && o.connections < o.threads) {
    return usage("closed loop over HTTP needs --connections >= --threads");
  }
  if (app.count("--http-timeout-ms") == 0) o.http_timeout = o.timeout;
  o.io_threads = std::min(o.io_threads, o.connections);
  return {};
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv, int& exit_code) {
  Options o;
  std::string input_bytes = "16:256";
  std::int64_t timeout_ms = o.timeout.count();
  std::int64_t connect_ms = o.connect_timeout.count();
  std::int64_t http_timeout_ms = 0;
  std::uint64_t requests = 0;
  double duration = 0.0;
  std::string priority, priority_mix, protocol = "v1";
  CLI::App app{"batchd-stress: load a batchd daemon and check every answer"};
  add_options(app, o, input_bytes, timeout_ms, connect_ms, requests, duration);
  add_priority_options(app, priority, priority_mix);
  add_front_end_options(app, o, http_timeout_ms, protocol);
  try {
    app.parse(argc, argv);
    // CLI11's own exception: the tool's start-up, where a bad option ends the run with usage.
    const Expected<InputBytes> range = parse_input_bytes(input_bytes);
    if (!range) throw CLI::ValidationError("--input-bytes", range.error().message);
    o.min_input_bytes = range->min;
    o.max_input_bytes = range->max;
    if (!o.input_file.empty()) {
      Expected<InputFile> replay = read_input_file(o.input_file);
      if (!replay) throw CLI::ValidationError("--input-file", replay.error().message);
      o.replay = std::move(replay->inputs);
      for (std::size_t i = 0; i < replay->outputs.size(); ++i) o.expected.emplace(o.replay[i], replay->outputs[i]);
      const auto [shortest, longest] = std::minmax_element(
          o.replay.begin(), o.replay.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
      o.min_input_bytes = static_cast<std::uint32_t>(shortest->size());
      o.max_input_bytes = static_cast<std::uint32_t>(longest->size());
    }
    const Expected<PriorityMix> mix = parse_priority_flags(app, priority, priority_mix);
    if (!mix) throw CLI::ValidationError(mix.error().message);
    o.priority_mix = *mix;
    o.mode = app.count("--rate") + app.count("--shape") > 0 ? Mode::kOpen : Mode::kClosed;
    if (app.count("--shape") > 0) {
      Expected<RateShape> parsed = RateShape::parse(o.shape_spec);
      if (!parsed) throw CLI::ValidationError("--shape", parsed.error().message);
      o.shape = std::move(*parsed);
    } else {
      o.shape = RateShape::constant(o.rate);
    }
    if ((o.warmup_s > 0 || o.cooldown_s > 0) && o.mode != Mode::kOpen) {
      throw CLI::ValidationError("--warmup and --cooldown", "are for the open loop (--rate or --shape)");
    }
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.http_timeout = std::chrono::milliseconds(http_timeout_ms);
    if (auto chosen = finish_protocol(app, o, protocol); !chosen) throw CLI::ValidationError(chosen.error().message);
    const Expected<void> front = o.transport == TransportKind::kGrpc ? finish_grpc(app, o) : finish_http(app, o);
    if (!front) throw CLI::ValidationError(front.error().message);
    if (!o.models.empty() && o.transport != TransportKind::kShm) {
      throw CLI::ValidationError("--model", "is sent over shared memory only: batchd-http and batchd-grpc pick "
                                            "the model from the request's path or message");
    }
    // Found out now rather than after connecting ("a": the run truncates it when it starts).
    if (!o.csv_path.empty()) {
      std::FILE* probe = std::fopen(o.csv_path.c_str(), "a");
      if (probe == nullptr) throw CLI::ValidationError("--csv", errno_failure(o.csv_path).message);
      std::fclose(probe);
    }
  } catch (const CLI::ParseError& e) {
    exit_code = app.exit(e) == 0 ? 0 : kExitUsage;
    return std::nullopt;
  }
  if (app.count("--requests") > 0) o.requests = requests;
  if (app.count("--duration") > 0) {
    o.duration_s = duration;
  } else if (!o.requests) {
    o.duration_s = kDefaultDurationS;  // an unbounded run is never what a stress test wants
  }
  if (app.count("--seed") == 0) o.seed = std::random_device{}();
  o.connect_timeout = std::chrono::milliseconds(connect_ms);
  return o;
}

}  // namespace batchd::stress

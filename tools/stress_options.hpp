// Command-line options of batchd-stress.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tools/stress_http_proto.hpp"
#include "tools/stress_priority.hpp"
#include "tools/stress_shape.hpp"

namespace batchd::stress {

enum class Mode { kClosed, kOpen };
// How requests reach the daemon: its shared-memory client library, an HTTP front-end, or a gRPC
// front-end.
enum class TransportKind { kShm, kHttp, kGrpc };

struct Options {
  std::string socket_path;  // empty: the client library's default path
  TransportKind transport = TransportKind::kShm;
  std::string http_url;             // --http: the front-end's base URL
  http::Api http_api = http::Api::kV1;  // --http: --protocol v1, v2 or jobs
  std::string grpc_target;          // --grpc: the front-end's HOST:PORT
  unsigned connections = 0;         // --http: keep-alive connections; --grpc: channels (set by parse_options)
  unsigned pipeline_depth = 16;     // --http open loop: requests outstanding per connection
  unsigned io_threads = 2;          // --http open loop: epoll threads; --grpc: completion queues
  Mode mode = Mode::kClosed;
  unsigned threads = 4;             // closed loop
  double rate = 0.0;                // --rate as given (parsed into shape)
  std::string shape_spec;           // --shape as given (parsed into shape)
  RateShape shape;                  // open loop: the rate over time (--rate: constant)
  std::optional<double> duration_s;  // unset: unbounded (only when a request cap is set)
  // Open loop: load runs this long before and after the measured window, uncounted, so the
  // window sees steady state (no cold start, no half-full last batch waiting for its timer).
  double warmup_s = 0.0;
  double cooldown_s = 0.0;
  std::optional<std::uint64_t> requests;  // total cap across all threads
  std::uint32_t min_input_bytes = 16;
  std::uint32_t max_input_bytes = 256;
  unsigned cost = 1;
  unsigned sim_repeat = 0;          // --expect-sim: answers are the sim backend's (0: SHA-256)
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds http_timeout{5000};  // sent as X-Timeout-Ms (default: timeout)
  PriorityMix priority_mix;         // --priority or --priority-mix: each request's class
  // --model (repeatable): the models requests go to in turn (empty: the daemon's default model).
  // Every model must answer as --cost and --expect-sim say.
  std::vector<std::string> models;
  // Request `id`'s model: like its class, a pure function of the id.
  [[nodiscard]] std::string_view model_for(std::uint64_t id) const noexcept {
    return models.empty() ? std::string_view() : std::string_view(models[id % models.size()]);
  }
  std::uint64_t seed = 0;
  bool json = false;
  bool quiet = false;
  std::string input_file;           // --input-file (read into replay by parse_options)
  std::string csv_path;             // --csv: per-second rows (empty: none)
  std::vector<std::string> replay;  // --input-file: inputs sent verbatim in turn (empty: random)
  // --input-file lines that give an "output": each answer must be it (empty: checked as above).
  std::unordered_map<std::string, std::string> expected;
  [[nodiscard]] const std::unordered_map<std::string, std::string>* expected_outputs() const noexcept {
    return expected.empty() ? nullptr : &expected;
  }
};

const char* mode_name(Mode mode) noexcept;
const char* transport_name(TransportKind transport) noexcept;
// "v1", "v2" or "grpc": what the requests speak ("shm" over shared memory, which has no --protocol).
const char* protocol_name(const Options& options) noexcept;

// Parses argv. Returns the options, or sets exit_code when parsing ended the program: 0 after
// --help, 64 after a usage error (already printed).
std::optional<Options> parse_options(int argc, char** argv, int& exit_code);

}  // namespace batchd::stress

// gpu_check: the cuda backend on a real GPU, in one short run (bench/gpu-check.sh drives it).
//  1. correctness: the cuda answers of >= 1,000,000 random strings (batches of 4096) are compared
//     with the CPU reference, computed on all cores; then a smaller run at cost 3;
//  2. throughput in inputs/s for batch sizes 1, 8, 64, 512, 4096: the kernel alone (CUDA events
//     around back-to-back launches on resident data), and whole Backend::run() calls (copies and
//     the wait included) on one lane and on all lanes at once.
// Prints readable lines and, with --json, writes the results as one JSON object.
// Exits 0 when every answer matched, 1 on a mismatch or failure, 77 when no GPU is visible.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "kernels/sha256_launch.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kHex = batchd::kDigestHexBytes;
constexpr int kExitSkipped = 77;
constexpr std::uint32_t kThroughputBatchSizes[] = {1, 8, 64, 512, 4096};
// Throughput inputs: batchd-stress's default length range.
constexpr std::uint32_t kThroughputMinLength = 16, kThroughputMaxLength = 256;
// One correctness batch in eight has inputs up to this long, the rest up to --max-length.
constexpr std::uint32_t kLongInputBytes = 4096;

struct Args {
  std::uint64_t strings = 1'000'000;      // correctness check at --cost
  std::uint64_t cost3_strings = 100'000;  // a second, smaller check at cost 3
  std::uint32_t batch = 4096;             // correctness batch size
  std::uint32_t max_length = 512;         // input bytes at most, in most batches
  unsigned cost = 1;
  unsigned streams = 2;            // streams per device
  unsigned threads = 0;            // CPU reference threads; 0: all cores
  double seconds_per_point = 0.3;  // per throughput measurement
  std::uint64_t seed = 1;
  std::string json_path;
};

// A batch in the flat layout of BatchInput.
struct FlatBatch {
  std::vector<char> bytes;
  std::vector<std::uint32_t> offsets{0};

  [[nodiscard]] batchd::BatchInput view() const {
    return {{bytes.data(), bytes.size()}, {offsets}};
  }
};

// splitmix64: fast enough that making a million inputs costs little next to hashing them.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
};

// Appends one input of exactly `length` bytes: printable ASCII with 2-, 3- and 4-byte UTF-8
// characters and the odd arbitrary byte mixed in.
void append_input(Rng& rng, std::size_t length, FlatBatch& batch) {
  static constexpr const char* kUtf8[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                          "\xd0\x96"};
  static constexpr std::size_t kUtf8Bytes[] = {2, 3, 4, 2};
  const std::size_t end = batch.bytes.size() + length;
  while (batch.bytes.size() < end) {
    const std::uint64_t r = rng.next();
    const std::size_t pick = r % 16, which = (r >> 8) % 4;
    if (pick < 3 && batch.bytes.size() + kUtf8Bytes[which] <= end) {
      batch.bytes.insert(batch.bytes.end(), kUtf8[which], kUtf8[which] + kUtf8Bytes[which]);
    } else if (pick == 3) {
      batch.bytes.push_back(static_cast<char>(r >> 16));
    } else {
      batch.bytes.push_back(static_cast<char>(' ' + (r >> 16) % 95));
    }
  }
  batch.offsets.push_back(static_cast<std::uint32_t>(batch.bytes.size()));
}

void fill_batch(Rng& rng, std::size_t count, std::uint32_t min_length, std::uint32_t max_length,
                FlatBatch& batch) {
  batch.bytes.clear();
  batch.offsets.assign(1, 0);
  for (std::size_t i = 0; i < count; ++i) {
    append_input(rng, min_length + rng.next() % (max_length - min_length + 1), batch);
  }
}

void die_on_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- 1. correctness ----------------------------------------------------------------------------

struct Correctness {
  unsigned cost = 1;
  std::uint64_t strings = 0;
  std::uint64_t mismatches = 0;  // answers that differ from the reference
  std::uint64_t failed_batches = 0;
  double seconds = 0;
  std::string first_problem;
};

// Shared by the correctness workers: the next batch to take, the lanes, and the tallies.
class CorrectnessRun {
 public:
  CorrectnessRun(const Args& args, batchd::Backend& backend, unsigned cost, std::uint64_t strings)
      : args_(args),
        backend_(backend),
        lane_locks_(backend.devices() * backend.streams_per_device()) {
    result_.cost = cost;
    result_.strings = strings;
  }

  // Takes batches until none are left.
  void work() {
    FlatBatch batch;
    batchd::BatchOutput out;
    std::vector<char> expected;
    const std::uint64_t batches = (result_.strings + args_.batch - 1) / args_.batch;
    for (std::uint64_t i = next_batch_++; i < batches; i = next_batch_++)
      check_batch(i, batch, out, expected);
  }

  [[nodiscard]] const Correctness& result() const { return result_; }

 private:
  void check_batch(std::uint64_t index, FlatBatch& batch, batchd::BatchOutput& out,
                   std::vector<char>& expected);
  batchd::BackendStatus run_on_lane(std::uint64_t index, const FlatBatch& batch,
                                    batchd::BatchOutput& out);
  void tally(std::uint64_t index, const FlatBatch& batch, const batchd::BackendStatus& status,
             const batchd::BatchOutput& out, const std::vector<char>& expected);

  const Args& args_;
  batchd::Backend& backend_;
  std::atomic<std::uint64_t> next_batch_{0};
  std::vector<std::mutex> lane_locks_;  // a lane runs one batch at a time
  std::mutex result_lock_;
  Correctness result_;
};

batchd::BackendStatus CorrectnessRun::run_on_lane(std::uint64_t index, const FlatBatch& batch,
                                                  batchd::BatchOutput& out) {
  const unsigned streams = backend_.streams_per_device();
  const auto lane = static_cast<unsigned>(index % lane_locks_.size());
  std::lock_guard hold(lane_locks_[lane]);
  return backend_.run({lane / streams, lane % streams}, batch.view(), out);
}

// One batch, made from its own seed: run on a lane, then checked against the CPU reference.
void CorrectnessRun::check_batch(std::uint64_t index, FlatBatch& batch, batchd::BatchOutput& out,
                                 std::vector<char>& expected) {
  Rng rng{args_.seed * 1'000'003 + index * 7919 + result_.cost};
  const std::uint64_t first = index * args_.batch;
  const auto count =
      static_cast<std::size_t>(std::min<std::uint64_t>(args_.batch, result_.strings - first));
  fill_batch(rng, count, 0, index % 8 == 7 ? kLongInputBytes : args_.max_length, batch);
  const batchd::BackendStatus status = run_on_lane(index, batch, out);
  const batchd::BatchInput in = batch.view();
  expected.resize(count * kHex);
  for (std::size_t i = 0; i < count; ++i) {
    batchd::reference_batchstring(in.at(i), result_.cost, expected.data() + i * kHex);
  }
  tally(index, batch, status, out, expected);
}

void CorrectnessRun::tally(std::uint64_t index, const FlatBatch& batch,
                           const batchd::BackendStatus& status, const batchd::BatchOutput& out,
                           const std::vector<char>& expected) {
  const batchd::BatchInput in = batch.view();
  std::uint64_t wrong = 0;
  std::string problem;
  if (!status.ok || out.size() != in.size()) {
    problem =
        fmt::format("batch {}: {}", index, status.ok ? "wrong number of answers" : status.message);
  } else {
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::string_view want(expected.data() + i * kHex, kHex);
      if (out.at(i) == want) continue;
      if (wrong++ == 0) {
        problem = fmt::format("batch {} input {} ({} bytes): cuda {} cpu {}", index, i,
                              in.at(i).size(), out.at(i), want);
      }
    }
  }
  std::lock_guard hold(result_lock_);
  result_.mismatches += wrong;
  result_.failed_batches += status.ok ? 0 : 1;
  if (result_.first_problem.empty()) result_.first_problem = problem;
}

Correctness check_correctness(const Args& args, batchd::Backend& backend, unsigned cost,
                              std::uint64_t strings) {
  CorrectnessRun run(args, backend, cost, strings);
  const unsigned threads =
      args.threads > 0 ? args.threads : std::max(1U, std::thread::hardware_concurrency());
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&run] { run.work(); });
  for (auto& worker : workers) worker.join();
  Correctness result = run.result();
  result.seconds = seconds_since(start);
  fmt::print("correctness cost {}: {} strings, {} mismatches, {} failed batches, {:.1f} s{}{}\n",
             cost, result.strings, result.mismatches, result.failed_batches, result.seconds,
             result.first_problem.empty() ? "" : "; first: ", result.first_problem);
  return result;
}

// ---- 2. throughput -----------------------------------------------------------------------------

struct Throughput {
  std::uint32_t batch = 0;
  double kernel_us_per_batch = 0;
  double kernel_inputs_per_s = 0;
  double run_one_lane_inputs_per_s = 0;   // Backend::run() back to back on one lane
  double run_all_lanes_inputs_per_s = 0;  // every lane of every device at once
};

// Kernel-only time per batch: the batch stays on the device and launches go back to back, so
// copies and host waits are left out. Uses the first device of the backend (ordinal 0).
double kernel_us_per_batch(const FlatBatch& batch, unsigned cost, double seconds) {
  const auto count = static_cast<std::uint32_t>(batch.offsets.size() - 1);
  char* bytes = nullptr;
  std::uint32_t* offsets = nullptr;
  char* out = nullptr;
  cudaEvent_t begin, end;
  die_on_cuda(cudaSetDevice(0), "cudaSetDevice");
  die_on_cuda(
      cudaMalloc(reinterpret_cast<void**>(&bytes), std::max<std::size_t>(batch.bytes.size(), 1)),
      "cudaMalloc");
  die_on_cuda(cudaMalloc(reinterpret_cast<void**>(&offsets), batch.offsets.size() * 4),
              "cudaMalloc");
  die_on_cuda(cudaMalloc(reinterpret_cast<void**>(&out), std::size_t{count} * kHex), "cudaMalloc");
  die_on_cuda(cudaMemcpy(bytes, batch.bytes.data(), batch.bytes.size(), cudaMemcpyHostToDevice),
              "copy");
  die_on_cuda(
      cudaMemcpy(offsets, batch.offsets.data(), batch.offsets.size() * 4, cudaMemcpyHostToDevice),
      "copy");
  die_on_cuda(cudaEventCreate(&begin), "cudaEventCreate");
  die_on_cuda(cudaEventCreate(&end), "cudaEventCreate");
  auto time_launches = [&](int launches) {
    die_on_cuda(cudaEventRecord(begin, nullptr), "cudaEventRecord");
    for (int i = 0; i < launches; ++i) {
      die_on_cuda(batchd::kernels::launch_batchstring(bytes, offsets, count, cost, out, nullptr),
                  "launch");
    }
    die_on_cuda(cudaEventRecord(end, nullptr), "cudaEventRecord");
    die_on_cuda(cudaEventSynchronize(end), "kernel");
    float ms = 0;
    die_on_cuda(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    return 1000.0 * ms / launches;
  };
  time_launches(3);  // warm-up
  const double probe_us = time_launches(10);
  const int launches =
      static_cast<int>(std::clamp(seconds * 1e6 / std::max(probe_us, 1.0), 10.0, 1e6));
  const double us = time_launches(launches);
  (void)cudaEventDestroy(begin), (void)cudaEventDestroy(end);
  (void)cudaFree(bytes), (void)cudaFree(offsets), (void)cudaFree(out);
  return us;
}

// Inputs per second through Backend::run() on `lanes` lanes at once, each looping for `seconds`.
double run_inputs_per_s(batchd::Backend& backend, const FlatBatch& batch, unsigned lanes,
                        double seconds) {
  std::atomic<std::uint64_t> inputs{0};
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (unsigned lane = 0; lane < lanes; ++lane) {
    threads.emplace_back([&, lane] {
      const unsigned streams = backend.streams_per_device();
      batchd::BatchOutput out;
      while (seconds_since(start) < seconds) {
        if (!backend.run({lane / streams, lane % streams}, batch.view(), out).ok) failed = true;
        inputs += out.size();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (failed) std::fprintf(stderr, "gpu_check: a throughput batch failed\n");
  return static_cast<double>(inputs) / seconds_since(start);
}

std::vector<Throughput> measure_throughput(const Args& args, batchd::Backend& backend) {
  std::vector<Throughput> points;
  const unsigned all_lanes = backend.devices() * backend.streams_per_device();
  for (const std::uint32_t size : kThroughputBatchSizes) {
    Rng rng{args.seed + size};
    FlatBatch batch;
    fill_batch(rng, size, kThroughputMinLength, kThroughputMaxLength, batch);
    Throughput point;
    point.batch = size;
    point.kernel_us_per_batch = kernel_us_per_batch(batch, args.cost, args.seconds_per_point);
    point.kernel_inputs_per_s = size / (point.kernel_us_per_batch * 1e-6);
    point.run_one_lane_inputs_per_s = run_inputs_per_s(backend, batch, 1, args.seconds_per_point);
    point.run_all_lanes_inputs_per_s =
        run_inputs_per_s(backend, batch, all_lanes, args.seconds_per_point);
    fmt::print(
        "throughput batch {:>4}: kernel {:9.1f} us/batch {:12.0f} inputs/s | run() 1 lane {:12.0f} "
        "inputs/s, {} lanes {:12.0f} inputs/s\n",
        size, point.kernel_us_per_batch, point.kernel_inputs_per_s, point.run_one_lane_inputs_per_s,
        all_lanes, point.run_all_lanes_inputs_per_s);
    points.push_back(point);
  }
  return points;
}

// ---- report ------------------------------------------------------------------------------------

std::string json_string(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      quoted += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

std::string device_json() {
  int device = 0;
  cudaDeviceProp props{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    return "{}";
  }
  return fmt::format(R"({{"name": {}, "sm": "{}.{}", "multiprocessors": {}}})",
                     json_string(props.name), props.major, props.minor, props.multiProcessorCount);
}

void write_json(const Args& args, const batchd::Backend& backend,
                const std::vector<Correctness>& checks, const std::vector<Throughput>& points) {
  std::string json =
      fmt::format(R"({{"device": {}, "devices": {}, "streams_per_device": {}, "correctness": [)",
                  device_json(), backend.devices(), backend.streams_per_device());
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Correctness& c = checks[i];
    json += fmt::format(
        R"({}{{"cost": {}, "strings": {}, "mismatches": {}, "failed_batches": {}, )"
        R"("seconds": {:.3f}, "first_problem": {}}})",
        i ? ", " : "", c.cost, c.strings, c.mismatches, c.failed_batches, c.seconds,
        json_string(c.first_problem));
  }
  json += fmt::format(R"(], "throughput_cost": {}, "throughput": [)", args.cost);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Throughput& p = points[i];
    json += fmt::format(
        R"({}{{"batch": {}, "kernel_us_per_batch": {:.2f}, "kernel_inputs_per_s": {:.0f}, )"
        R"("run_one_lane_inputs_per_s": {:.0f}, "run_all_lanes_inputs_per_s": {:.0f}}})",
        i ? ", " : "", p.batch, p.kernel_us_per_batch, p.kernel_inputs_per_s,
        p.run_one_lane_inputs_per_s, p.run_all_lanes_inputs_per_s);
  }
  json += "]}\n";
  std::FILE* file = std::fopen(args.json_path.c_str(), "w");
  if (file == nullptr) {
    std::fprintf(stderr, "gpu_check: cannot write %s\n", args.json_path.c_str());
    return;
  }
  std::fputs(json.c_str(), file);
  std::fclose(file);
}

int parse_args(int argc, char** argv, Args& args) {
  CLI::App app{"gpu_check: cuda backend correctness against the CPU reference, and throughput"};
  app.add_option("--strings", args.strings, "strings in the correctness check")
      ->capture_default_str();
  app.add_option("--cost3-strings", args.cost3_strings, "strings in the cost-3 check (0: skip)")
      ->capture_default_str();
  app.add_option("--batch", args.batch, "correctness batch size")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1U << 16));
  app.add_option("--max-length", args.max_length, "longest input in most batches")
      ->capture_default_str()
      ->check(CLI::Range(1U, 4096U));
  app.add_option("--cost", args.cost, "SHA-256 rounds")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1U << 20));
  app.add_option("--streams", args.streams, "streams per device")
      ->capture_default_str()
      ->check(CLI::Range(1U, 64U));
  app.add_option("--threads", args.threads, "CPU reference threads (0: all cores)")
      ->capture_default_str();
  app.add_option("--seconds-per-point", args.seconds_per_point,
                 "seconds per throughput measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  app.add_option("--seed", args.seed, "input seed")->capture_default_str();
  app.add_option("--json", args.json_path, "write the results to this file as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const int exit_code = parse_args(argc, argv, args); exit_code >= 0) return exit_code;
  if (const auto gpus = batchd::cuda_device_count(); !gpus) {
    std::printf("gpu_check: skipped: %s\n", gpus.error().message.c_str());
    return kExitSkipped;
  }
  batchd::CudaBackendOptions options;
  options.streams_per_device = args.streams;
  options.cost = args.cost;
  options.max_batch =
      std::max(args.batch, kThroughputBatchSizes[std::size(kThroughputBatchSizes) - 1]);
  options.max_batch_bytes = std::uint64_t{options.max_batch} * kLongInputBytes;
  auto made = batchd::make_cuda_backend(options);
  if (!made) {
    std::fprintf(stderr, "gpu_check: %s\n", made.error().message.c_str());
    return 1;
  }
  const std::unique_ptr<batchd::Backend> backend = std::move(*made);
  std::vector<Correctness> checks{check_correctness(args, *backend, args.cost, args.strings)};
  if (args.cost3_strings > 0 && args.cost != 3) {
    options.cost = 3;
    auto cost3 = batchd::make_cuda_backend(options);
    if (!cost3) {
      std::fprintf(stderr, "gpu_check: %s\n", cost3.error().message.c_str());
      return 1;
    }
    checks.push_back(check_correctness(args, **cost3, 3, args.cost3_strings));
  }
  const std::vector<Throughput> points = measure_throughput(args, *backend);
  if (!args.json_path.empty()) write_json(args, *backend, checks, points);
  const bool all_matched = std::all_of(checks.begin(), checks.end(), [](const Correctness& c) {
    return c.mismatches == 0 && c.failed_batches == 0;
  });
  std::printf("gpu_check: %s\n", all_matched ? "all answers match the CPU reference" : "MISMATCH");
  return all_matched ? 0 : 1;
}

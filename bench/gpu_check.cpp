// gpu_check: the cuda backend on a real GPU, one step per run so that bench/gpu-check.sh can give
// each step its own timeout:
//   versions     the CUDA version the driver supports and the one this (static) runtime needs,
//                and the visible devices; the script decides whether the runtime can run there;
//   correctness  cuda answers against the CPU reference (computed on all cores) for --strings
//                inputs: every length around a SHA-256 padding boundary up to --max-input-bytes,
//                then random inputs (one batch in eight multi-block, up to 4096 bytes);
//   throughput   by batch size up to 65,536 inputs: the kernel alone (CUDA events around
//                back-to-back launches on resident data) in inputs/s and GB/s, and whole
//                Backend::run() calls (copies and the wait included) on one lane and on all.
// Prints readable lines and, with --json, writes the step's results as one JSON object whose
// "summary" is one line for the script's table.
// Exits 0 when the step passed, 1 on a mismatch or failure, 77 when no GPU is visible.
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
constexpr std::uint32_t kThroughputBatchSizes[] = {1, 64, 1024, 8192, 65536};
// Throughput inputs: batchd-stress's default length range.
constexpr std::uint32_t kThroughputMinLength = 16, kThroughputMaxLength = 256;
// One random correctness batch in eight has inputs up to this long, the rest up to --max-length.
constexpr std::uint32_t kLongInputBytes = 4096;
// The backend's pinned and device buffers are sized once for the largest batch of any step: the
// throughput ladder's top (65,536 inputs of at most 256 bytes), a long random batch (4,096 of at
// most 4,096 bytes) and a batch of boundary-length inputs (packed up to this) all fit.
constexpr std::uint32_t kMaxBatchInputs = 65536;
constexpr std::uint64_t kMaxBatchBytes = 16U << 20;

enum class Step { kVersions, kCorrectness, kThroughput };

struct Args {
  Step step = Step::kVersions;
  std::uint64_t strings = 1'000'000;  // correctness inputs, the boundary lengths included
  std::uint32_t batch = 4096;         // random correctness batch size
  std::uint32_t max_length = 512;     // input bytes at most, in most random batches
  // The longest boundary input: batchd's default --max-input-bytes, the largest input a client
  // can send it.
  std::uint32_t max_input_bytes = 65536;
  unsigned cost = 1;
  unsigned streams = 2;            // streams per device
  unsigned threads = 0;            // CPU reference threads; 0: all cores
  double seconds_per_point = 0.3;  // per throughput measurement
  std::uint32_t largest_batch = 65536;  // the throughput ladder stops at this size
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

// Every input length where SHA-256's padding changes shape, up to max_bytes: for each block
// boundary 64k, the last length whose padding fits its final block (64k - 9), the first that
// spills into another (64k - 8), and the lengths just below, at and above the boundary; plus the
// empty input and max_bytes itself. Packed into batches of at most kMaxBatchBytes bytes.
std::vector<std::vector<std::uint32_t>> boundary_batches(std::uint32_t max_bytes) {
  std::vector<std::uint32_t> lengths{0, 1, max_bytes};
  for (std::uint64_t edge = 64; edge <= max_bytes + std::uint64_t{1}; edge += 64) {
    for (const std::uint64_t length : {edge - 9, edge - 8, edge - 1, edge, edge + 1}) {
      if (length <= max_bytes) lengths.push_back(static_cast<std::uint32_t>(length));
    }
  }
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  std::vector<std::vector<std::uint32_t>> batches(1);
  std::uint64_t bytes = 0;
  for (const std::uint32_t length : lengths) {
    if (bytes + length > kMaxBatchBytes || batches.back().size() == kMaxBatchInputs) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().push_back(length);
    bytes += length;
  }
  return batches;
}

struct Correctness {
  unsigned cost = 1;
  std::uint64_t strings = 0;
  std::uint64_t boundary_strings = 0;  // of `strings`, those of boundary_batches()
  std::uint64_t mismatches = 0;  // answers that differ from the reference
  std::uint64_t failed_batches = 0;
  double seconds = 0;
  std::string first_problem;
};

// Shared by the correctness workers: the next batch to take, the lanes, and the tallies.
class CorrectnessRun {
 public:
  CorrectnessRun(const Args& args, batchd::Backend& backend)
      : args_(args),
        backend_(backend),
        boundary_(boundary_batches(args.max_input_bytes)),
        lane_locks_(backend.devices() * backend.streams_per_device()) {
    result_.cost = args.cost;
    for (const auto& lengths : boundary_) result_.boundary_strings += lengths.size();
    result_.strings = std::max(args.strings, result_.boundary_strings);
    random_strings_ = result_.strings - result_.boundary_strings;
  }

  // Takes batches until none are left: the boundary batches, then the random ones.
  void work() {
    FlatBatch batch;
    batchd::BatchOutput out;
    std::vector<char> expected;
    const std::uint64_t batches =
        boundary_.size() + (random_strings_ + args_.batch - 1) / args_.batch;
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
  const std::vector<std::vector<std::uint32_t>> boundary_;
  std::uint64_t random_strings_ = 0;
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
  if (index < boundary_.size()) {
    batch.bytes.clear();
    batch.offsets.assign(1, 0);
    for (const std::uint32_t length : boundary_[index]) append_input(rng, length, batch);
  } else {
    const std::uint64_t first = (index - boundary_.size()) * args_.batch;
    const auto count =
        static_cast<std::size_t>(std::min<std::uint64_t>(args_.batch, random_strings_ - first));
    fill_batch(rng, count, 0, index % 8 == 7 ? kLongInputBytes : args_.max_length, batch);
  }
  const batchd::BackendStatus status = run_on_lane(index, batch, out);
  const batchd::BatchInput in = batch.view();
  const std::size_t count = in.size();
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

Correctness check_correctness(const Args& args, batchd::Backend& backend) {
  CorrectnessRun run(args, backend);
  const unsigned threads =
      args.threads > 0 ? args.threads : std::max(1U, std::thread::hardware_concurrency());
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) workers.emplace_back([&run] { run.work(); });
  for (auto& worker : workers) worker.join();
  Correctness result = run.result();
  result.seconds = seconds_since(start);
  fmt::print(
      "correctness cost {}: {} strings ({} at padding boundaries up to {} bytes), {} mismatches, "
      "{} failed batches, {:.1f} s{}{}\n",
      result.cost, result.strings, result.boundary_strings, args.max_input_bytes,
      result.mismatches, result.failed_batches, result.seconds,
      result.first_problem.empty() ? "" : "; first: ", result.first_problem);
  return result;
}

// ---- 2. throughput -----------------------------------------------------------------------------

struct Throughput {
  std::uint32_t batch = 0;
  std::uint64_t input_bytes = 0;  // of the whole batch
  double kernel_us_per_batch = 0;
  double kernel_inputs_per_s = 0;
  double kernel_gb_per_s = 0;  // input bytes hashed (first round) per second, 1e9 bytes a GB
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
  batchd::kernels::LaunchShape shape;
  die_on_cuda(batchd::kernels::query_launch_shape(shape), "query_launch_shape");
  // Whole words: the kernel reads inputs in aligned 32-bit words (sha256_launch.hpp).
  die_on_cuda(cudaMalloc(reinterpret_cast<void**>(&bytes), (batch.bytes.size() + 4) / 4 * 4),
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
      die_on_cuda(batchd::kernels::launch_batchstring(bytes, offsets, count, cost, out, shape,
                                                      nullptr),
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
// Sets `failed` when a batch failed.
double run_inputs_per_s(batchd::Backend& backend, const FlatBatch& batch, unsigned lanes,
                        double seconds, std::atomic<bool>& failed) {
  std::atomic<std::uint64_t> inputs{0};
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
  return static_cast<double>(inputs) / seconds_since(start);
}

std::vector<Throughput> measure_throughput(const Args& args, batchd::Backend& backend,
                                           std::atomic<bool>& failed) {
  std::vector<Throughput> points;
  const unsigned all_lanes = backend.devices() * backend.streams_per_device();
  for (const std::uint32_t size : kThroughputBatchSizes) {
    if (size > args.largest_batch) break;
    Rng rng{args.seed + size};
    FlatBatch batch;
    fill_batch(rng, size, kThroughputMinLength, kThroughputMaxLength, batch);
    Throughput point;
    point.batch = size;
    point.input_bytes = batch.bytes.size();
    point.kernel_us_per_batch = kernel_us_per_batch(batch, args.cost, args.seconds_per_point);
    point.kernel_inputs_per_s = size / (point.kernel_us_per_batch * 1e-6);
    point.kernel_gb_per_s =
        static_cast<double>(point.input_bytes) / (point.kernel_us_per_batch * 1e-6) / 1e9;
    point.run_one_lane_inputs_per_s =
        run_inputs_per_s(backend, batch, 1, args.seconds_per_point, failed);
    point.run_all_lanes_inputs_per_s =
        run_inputs_per_s(backend, batch, all_lanes, args.seconds_per_point, failed);
    fmt::print(
        "throughput cost {} batch {:>5}: kernel {:10.1f} us/batch {:13.0f} inputs/s {:7.2f} GB/s | "
        "run() 1 lane {:12.0f} inputs/s, {} lanes {:12.0f} inputs/s\n",
        args.cost, size, point.kernel_us_per_batch, point.kernel_inputs_per_s,
        point.kernel_gb_per_s, point.run_one_lane_inputs_per_s, all_lanes,
        point.run_all_lanes_inputs_per_s);
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

bool write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    std::fprintf(stderr, "gpu_check: cannot write %s\n", path.c_str());
    return false;
  }
  const bool written = std::fputs(text.c_str(), file) >= 0;
  return std::fclose(file) == 0 && written;
}

std::string correctness_json(const Args& args, const Correctness& c) {
  const std::string summary =
      fmt::format("{} strings ({} at padding boundaries up to {} B), {} mismatches, {} failed "
                  "batches",
                  c.strings, c.boundary_strings, args.max_input_bytes, c.mismatches,
                  c.failed_batches);
  return fmt::format(
      R"({{"step": "correctness", "cost": {}, "strings": {}, "boundary_strings": {}, )"
      R"("max_input_bytes": {}, "mismatches": {}, "failed_batches": {}, "seconds": {:.3f}, )"
      R"("first_problem": {}, "device": {}, "summary": {}}})"
      "\n",
      c.cost, c.strings, c.boundary_strings, args.max_input_bytes, c.mismatches, c.failed_batches,
      c.seconds, json_string(c.first_problem), device_json(), json_string(summary));
}

std::string throughput_json(const Args& args, const batchd::Backend& backend,
                            const std::vector<Throughput>& points, bool failed) {
  std::string json = fmt::format(
      R"({{"step": "throughput", "cost": {}, "devices": {}, "streams_per_device": {}, )"
      R"("failed": {}, "device": {}, "points": [)",
      args.cost, backend.devices(), backend.streams_per_device(), failed, device_json());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Throughput& p = points[i];
    json += fmt::format(
        R"({}{{"batch": {}, "input_bytes": {}, "kernel_us_per_batch": {:.2f}, )"
        R"("kernel_inputs_per_s": {:.0f}, "kernel_gb_per_s": {:.3f}, )"
        R"("run_one_lane_inputs_per_s": {:.0f}, "run_all_lanes_inputs_per_s": {:.0f}}})",
        i ? ", " : "", p.batch, p.input_bytes, p.kernel_us_per_batch, p.kernel_inputs_per_s,
        p.kernel_gb_per_s, p.run_one_lane_inputs_per_s, p.run_all_lanes_inputs_per_s);
  }
  const Throughput& top = points.back();
  const std::string summary = fmt::format(
      "batch {}: kernel {:.3g} inputs/s, {:.3g} GB/s; run() on all lanes {:.3g} inputs/s",
      top.batch, top.kernel_inputs_per_s, top.kernel_gb_per_s, top.run_all_lanes_inputs_per_s);
  return json + fmt::format(R"(], "summary": {}}})", json_string(summary)) + "\n";
}

// ---- steps -------------------------------------------------------------------------------------

// Reports versions and devices and leaves the verdict to the script: with a driver older than the
// runtime, cudaGetDeviceCount() fails, and only the two versions say why.
int run_versions(const Args& args) {
  int driver = 0, runtime = 0, devices = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 where no driver is loaded: the script says so
  (void)cudaRuntimeGetVersion(&runtime);
  const cudaError_t count = cudaGetDeviceCount(&devices);
  const std::string error = count == cudaSuccess ? "" : cudaGetErrorString(count);
  if (count != cudaSuccess) devices = 0;
  const std::string summary =
      fmt::format("driver supports CUDA {}.{}, static runtime CUDA {}.{}, {} device(s){}{}",
                  driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                  devices, error.empty() ? "" : ": ", error);
  fmt::print("versions: {}\n", summary);
  const std::string json =
      fmt::format(R"({{"step": "versions", "driver_version": {}, "runtime_version": {}, )"
                  R"("devices": {}, "device_error": {}, "summary": {}}})"
                  "\n",
                  driver, runtime, devices, json_string(error), json_string(summary));
  return write_file(args.json_path, json) ? 0 : 1;
}

batchd::Expected<std::unique_ptr<batchd::Backend>> make_backend(const Args& args) {
  batchd::CudaBackendOptions options;
  options.streams_per_device = args.streams;
  options.cost = args.cost;
  options.max_batch = kMaxBatchInputs;
  options.max_batch_bytes = kMaxBatchBytes;
  return batchd::make_cuda_backend(options);
}

int run_correctness(const Args& args, batchd::Backend& backend) {
  const Correctness result = check_correctness(args, backend);
  const bool matched = result.mismatches == 0 && result.failed_batches == 0;
  std::printf("gpu_check: %s\n", matched ? "all answers match the CPU reference" : "MISMATCH");
  return write_file(args.json_path, correctness_json(args, result)) && matched ? 0 : 1;
}

int run_throughput(const Args& args, batchd::Backend& backend) {
  std::atomic<bool> failed{false};
  const std::vector<Throughput> points = measure_throughput(args, backend, failed);
  if (failed) std::fprintf(stderr, "gpu_check: a throughput batch failed\n");
  return write_file(args.json_path, throughput_json(args, backend, points, failed)) && !failed
             ? 0
             : 1;
}

int parse_args(int argc, char** argv, Args& args) {
  CLI::App app{"gpu_check: the cuda backend against the CPU reference, and its throughput"};
  app.require_subcommand(1);
  // The common options may follow the step's name (gpu_check correctness --cost 1000 --json F).
  app.fallthrough();
  app.add_option("--json", args.json_path, "write the step's results to this file as JSON");
  app.add_option("--streams", args.streams, "streams per device")
      ->capture_default_str()
      ->check(CLI::Range(1U, 64U));
  app.add_option("--cost", args.cost, "SHA-256 rounds")
      ->capture_default_str()
      ->check(CLI::Range(1U, 1U << 20));
  app.add_option("--seed", args.seed, "input seed")->capture_default_str();
  CLI::App* versions = app.add_subcommand("versions", "driver and runtime CUDA versions, devices");
  CLI::App* correctness = app.add_subcommand("correctness", "cuda answers against the reference");
  correctness->add_option("--strings", args.strings, "inputs, the boundary lengths included")
      ->capture_default_str();
  correctness->add_option("--batch", args.batch, "random batch size")
      ->capture_default_str()
      ->check(CLI::Range(1U, 4096U));
  correctness->add_option("--max-length", args.max_length, "longest input in most random batches")
      ->capture_default_str()
      ->check(CLI::Range(1U, kLongInputBytes));
  correctness->add_option("--max-input-bytes", args.max_input_bytes, "longest boundary input")
      ->capture_default_str()
      ->check(CLI::Range(1U, static_cast<unsigned>(kMaxBatchBytes)));
  correctness->add_option("--threads", args.threads, "CPU reference threads (0: all cores)")
      ->capture_default_str();
  CLI::App* throughput = app.add_subcommand("throughput", "inputs/s and GB/s by batch size");
  throughput
      ->add_option("--seconds-per-point", args.seconds_per_point,
                   "seconds per throughput measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 60.0));
  // A ladder cut short is for a slow host (the fake runtime's smoke run under the sanitizers, where
  // every "launch" of 65,536 inputs hashes them on the CPU), never for a GPU's measurement.
  throughput->add_option("--largest-batch", args.largest_batch, "the ladder's largest batch size")
      ->capture_default_str()
      ->check(CLI::Range(1U, kMaxBatchInputs));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 64;
  }
  args.step = versions->parsed()      ? Step::kVersions
              : correctness->parsed() ? Step::kCorrectness
                                      : Step::kThroughput;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const int exit_code = parse_args(argc, argv, args); exit_code >= 0) return exit_code;
  if (args.step == Step::kVersions) return run_versions(args);
  if (const auto gpus = batchd::cuda_device_count(); !gpus) {
    std::printf("gpu_check: skipped: %s\n", gpus.error().message.c_str());
    return kExitSkipped;
  }
  auto made = make_backend(args);
  if (!made) {
    std::fprintf(stderr, "gpu_check: %s\n", made.error().message.c_str());
    return 1;
  }
  return args.step == Step::kCorrectness ? run_correctness(args, **made)
                                         : run_throughput(args, **made);
}

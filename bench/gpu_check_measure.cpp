// gpu_check's runners: the correctness and throughput steps' work on the backend, each printing
// its readable lines as it goes. How the backend is driven and timed lives here alone, so that it
// can change without touching the inputs a seed makes or the JSON the script reads.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "bench/gpu_check.hpp"
#include "kernels/sha256_launch.hpp"

namespace batchd::gpu_check {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kHex = batchd::kDigestHexBytes;
constexpr std::uint32_t kThroughputBatchSizes[] = {1, 64, 1024, 8192, 65536};
// Throughput inputs: batchd-stress's default length range.
constexpr std::uint32_t kThroughputMinLength = 16, kThroughputMaxLength = 256;

void die_on_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- correctness -------------------------------------------------------------------------------

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

}  // namespace

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

// ---- throughput --------------------------------------------------------------------------------

namespace {

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

}  // namespace

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

}  // namespace batchd::gpu_check

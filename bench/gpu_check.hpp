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
//
// Split by what changes for different reasons: the inputs (gpu_check_inputs.cpp) decide what a
// check covers, the runners (gpu_check_measure.cpp) how the backend is driven and timed, the
// report (gpu_check_report.cpp) the JSON keys that bench/gpu-check.sh reads, and gpu_check.cpp
// the command line and the exit status the script acts on. This header is what they share; what
// only one of them uses stays in that file.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace batchd::gpu_check {

// One random correctness batch in eight has inputs up to this long, the rest up to --max-length.
inline constexpr std::uint32_t kLongInputBytes = 4096;
// The backend's pinned and device buffers are sized once for the largest batch of any step: the
// throughput ladder's top (65,536 inputs of at most 256 bytes), a long random batch (4,096 of at
// most 4,096 bytes) and a batch of boundary-length inputs (packed up to this) all fit.
inline constexpr std::uint32_t kMaxBatchInputs = 65536;
inline constexpr std::uint64_t kMaxBatchBytes = 16U << 20;

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

// What the versions step found; the script, not gpu_check, judges it.
struct Versions {
  int driver = 0;  // the CUDA version the driver supports, 1000 * major + 10 * minor; 0: none
  int runtime = 0;  // the CUDA version this (static) runtime needs, likewise
  int devices = 0;
  std::string device_error;  // why the devices could not be counted; empty when they could
};

struct Correctness {
  unsigned cost = 1;
  std::uint64_t strings = 0;
  std::uint64_t boundary_strings = 0;  // of `strings`, those of boundary_batches()
  std::uint64_t mismatches = 0;  // answers that differ from the reference
  std::uint64_t failed_batches = 0;
  double seconds = 0;
  std::string first_problem;
};

// One point of the throughput ladder.
struct Throughput {
  std::uint32_t batch = 0;
  std::uint64_t input_bytes = 0;  // of the whole batch
  double kernel_us_per_batch = 0;
  double kernel_inputs_per_s = 0;
  double kernel_gb_per_s = 0;  // input bytes hashed (first round) per second, 1e9 bytes a GB
  double run_one_lane_inputs_per_s = 0;   // Backend::run() back to back on one lane
  double run_all_lanes_inputs_per_s = 0;  // every lane of every device at once
};

// ---- inputs (gpu_check_inputs.cpp) -------------------------------------------------------------

// Appends one input of exactly `length` bytes: printable ASCII with 2-, 3- and 4-byte UTF-8
// characters and the odd arbitrary byte mixed in.
void append_input(Rng& rng, std::size_t length, FlatBatch& batch);
// Replaces `batch` with `count` inputs of lengths drawn from [min_length, max_length].
void fill_batch(Rng& rng, std::size_t count, std::uint32_t min_length, std::uint32_t max_length,
                FlatBatch& batch);
// Every input length where SHA-256's padding changes shape, up to max_bytes, as the lengths of
// batches that each fit the backend's buffers.
std::vector<std::vector<std::uint32_t>> boundary_batches(std::uint32_t max_bytes);

// ---- runners (gpu_check_measure.cpp) -----------------------------------------------------------

// Runs the correctness inputs on every lane of `backend` and prints the tally.
Correctness check_correctness(const Args& args, batchd::Backend& backend);
// Runs the throughput ladder and prints each point; sets `failed` when a batch failed.
std::vector<Throughput> measure_throughput(const Args& args, batchd::Backend& backend,
                                           std::atomic<bool>& failed);

// ---- report (gpu_check_report.cpp) -------------------------------------------------------------

// Writes `text` to `path`, or nothing where path is empty (no --json); false, said on stderr,
// when it could not.
bool write_file(const std::string& path, const std::string& text);
// The versions line, printed as it is and the JSON's "summary".
std::string versions_summary(const Versions& v);
// Each step's --json file: one object, whose "summary" is one line for the script's table.
std::string versions_json(const Versions& v);
std::string correctness_json(const Args& args, const Correctness& c);
// `points` is never empty: the ladder starts at batch 1, at or below any --largest-batch.
std::string throughput_json(const Args& args, const batchd::Backend& backend,
                            const std::vector<Throughput>& points, bool failed);

}  // namespace batchd::gpu_check

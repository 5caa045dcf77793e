// gpu_check's command line and steps (the program: gpu_check.hpp): runs the one step asked for
// and turns its result into the exit status that bench/gpu-check.sh acts on: 0 when the step
// passed, 1 on a mismatch or failure, 77 when no GPU is visible.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu_check.hpp"
#include "kernels/cuda_backend.hpp"

namespace batchd::gpu_check {

namespace {

constexpr int kExitSkipped = 77;

// Reports versions and devices and leaves the verdict to the script: with a driver older than the
// runtime, cudaGetDeviceCount() fails, and only the two versions say why.
int run_versions(const Args& args) {
  Versions versions;
  (void)cudaDriverGetVersion(&versions.driver);  // 0 where no driver is loaded: the script says so
  (void)cudaRuntimeGetVersion(&versions.runtime);
  if (const cudaError_t count = cudaGetDeviceCount(&versions.devices); count != cudaSuccess) {
    versions.device_error = cudaGetErrorString(count);
    versions.devices = 0;
  }
  fmt::print("versions: {}\n", versions_summary(versions));
  return write_file(args.json_path, versions_json(versions)) ? 0 : 1;
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

}  // namespace batchd::gpu_check

int main(int argc, char** argv) {
  using namespace batchd::gpu_check;
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

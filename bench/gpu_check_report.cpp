// gpu_check's report: each step's results as the one JSON object that bench/gpu-check.sh reads,
// so that the keys it depends on are written in one place.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "bench/gpu_check.hpp"
#include "kernels/sha256_launch.hpp"

namespace batchd::gpu_check {

namespace {

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

// The device the numbers came from; "{}" where it cannot be asked, so the report is still
// written.
std::string device_json() {
  int device = 0;
  cudaDeviceProp props{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    return "{}";
  }
  // The kernel's fit to the device, as the backend reads it: what docs/GPU.md's model assumes.
  batchd::kernels::LaunchShape shape;
  if (batchd::kernels::query_launch_shape(shape) != cudaSuccess) shape = {};
  return fmt::format(
      R"({{"name": {}, "sm": "{}.{}", "multiprocessors": {}, "max_blocks_per_multiprocessor": {}, )"
      R"("kernel_max_threads_per_block": {}, "kernel_resident_threads": {}}})",
      json_string(props.name), props.major, props.minor, props.multiProcessorCount,
      shape.max_blocks_per_multiprocessor, shape.max_threads_per_block, shape.resident_threads);
}

}  // namespace

std::string versions_summary(const Versions& v) {
  return fmt::format("driver supports CUDA {}.{}, static runtime CUDA {}.{}, {} device(s){}{}",
                     v.driver / 1000, v.driver % 1000 / 10, v.runtime / 1000, v.runtime % 1000 / 10,
                     v.devices, v.device_error.empty() ? "" : ": ", v.device_error);
}

std::string versions_json(const Versions& v) {
  return fmt::format(R"({{"step": "versions", "driver_version": {}, "runtime_version": {}, )"
                     R"("devices": {}, "device_error": {}, "summary": {}}})"
                     "\n",
                     v.driver, v.runtime, v.devices, json_string(v.device_error),
                     json_string(versions_summary(v)));
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

}  // namespace batchd::gpu_check

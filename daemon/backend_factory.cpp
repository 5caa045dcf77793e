#include "daemon/backend_factory.hpp"

#include <spdlog/spdlog.h>

#include "daemon/cpu_backend.hpp"
#include "daemon/plugin_backend.hpp"
#include "daemon/sim_backend.hpp"
#include "daemon/worker_backend.hpp"
#if BATCHD_HAVE_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace batchd {
namespace {

constexpr std::string_view kPluginPrefix = "plugin:";

Expected<std::unique_ptr<Backend>> make_cuda(const ModelSettings& config) {
#if BATCHD_HAVE_CUDA
  CudaBackendOptions options;
  options.devices = config.cuda_devices;
  options.streams_per_device = config.streams_per_device;
  options.cost = config.cost;
  options.max_batch = config.batch.max_batch;
  options.max_batch_fills_devices = config.batch.max_batch_from_backend;
  options.max_batch_bytes = config.batch.max_batch_bytes;
  return make_cuda_backend(options);
#else
  (void)config;
  return make_failure(std::errc::not_supported,
                      "this batchd was built without CUDA (meson -Dcuda=enabled needs nvcc)");
#endif
}

Expected<int> visible_gpus() {
#if BATCHD_HAVE_CUDA
  return cuda_device_count();
#else
  return make_failure(std::errc::not_supported, "built without CUDA");
#endif
}

// cuda where it starts, else cpu, saying which and why.
std::unique_ptr<Backend> make_auto(const ModelSettings& config) {
  const Expected<int> gpus = visible_gpus();
  if (!gpus) {
    spdlog::info("backend: cpu, because no GPU is usable ({})", gpus.error().message);
    return std::make_unique<CpuBackend>(config.cost, config.cpu_threads);
  }
  auto cuda = make_cuda(config);
  if (cuda) {
    spdlog::info("backend: cuda ({} visible GPU(s); --backend cpu to override)", *gpus);
    return std::move(*cuda);
  }
  spdlog::warn("backend: cpu, because the cuda backend failed to start: {}", cuda.error().message);
  return std::make_unique<CpuBackend>(config.cost, config.cpu_threads);
}

}  // namespace

Expected<std::unique_ptr<Backend>> make_backend(const ModelSettings& config) {
  const std::string& name = config.backend;
  if (name == "auto") return make_auto(config);
  if (name == "cpu") {
    return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(config.cost, config.cpu_threads));
  }
  if (name == "sim") {
    if (config.sim.devices == 0 || config.sim.devices > 64) {
      return make_failure(std::errc::invalid_argument, "--sim-devices must be between 1 and 64");
    }
    return std::unique_ptr<Backend>(std::make_unique<SimBackend>(config.sim));
  }
  if (name == "cuda") {
    auto cuda = make_cuda(config);
    if (cuda) return cuda;
    return Failure{cuda.error().code, "cannot start the cuda backend: " + cuda.error().message};
  }
  if (name == "workers") {
    return std::unique_ptr<Backend>(std::make_unique<WorkerBackend>(
        WorkerBackendOptions{config.workers.max_workers, config.workers.lanes_per_worker}));
  }
  if (name.starts_with(kPluginPrefix)) {
    return load_plugin_backend(name.substr(kPluginPrefix.size()), config.plugin_config);
  }
  return make_failure(std::errc::invalid_argument,
                      "unknown backend '" + name + "' (choose auto, cpu, sim, cuda, plugin:PATH or workers)");
}

}  // namespace batchd

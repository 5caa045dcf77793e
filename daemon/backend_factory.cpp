#include "daemon/backend_factory.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "daemon/cpu_backend.hpp"
#include "daemon/plugin_backend.hpp"
#include "daemon/sim_backend.hpp"
#if BATCHD_HAVE_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace batchd {
namespace {

constexpr std::string_view kPluginPrefix = "plugin:";

std::unique_ptr<Backend> make_cuda(const DaemonConfig& config, std::string& why) {
#if BATCHD_HAVE_CUDA
  CudaBackendOptions options;
  options.devices = config.cuda_devices;
  options.streams_per_device = config.streams_per_device;
  options.cost = config.cost;
  options.max_batch = config.batch.max_batch;
  options.max_batch_bytes = config.batch.max_batch_bytes;
  return make_cuda_backend(options, why);
#else
  (void)config;
  why = "this batchd was built without CUDA (meson -Dcuda=enabled needs nvcc)";
  return nullptr;
#endif
}

int visible_gpus(std::string& why) {
#if BATCHD_HAVE_CUDA
  return cuda_device_count(why);
#else
  why = "built without CUDA";
  return 0;
#endif
}

}  // namespace

std::unique_ptr<Backend> make_backend(const DaemonConfig& config) {
  const std::string& name = config.backend;
  std::string why;
  if (name == "auto") {
    if (const int gpus = visible_gpus(why); gpus > 0) {
      if (auto backend = make_cuda(config, why)) {
        spdlog::info("backend: cuda ({} visible GPU(s); --backend cpu to override)", gpus);
        return backend;
      }
      spdlog::warn("backend: cpu, because the cuda backend failed to start: {}", why);
    } else {
      spdlog::info("backend: cpu, because no GPU is usable ({})", why);
    }
    return std::make_unique<CpuBackend>(config.cost, config.cpu_threads);
  }
  if (name == "cpu") return std::make_unique<CpuBackend>(config.cost, config.cpu_threads);
  if (name == "sim") {
    if (config.sim.devices == 0 || config.sim.devices > 64) {
      throw std::runtime_error("--sim-devices must be between 1 and 64");
    }
    return std::make_unique<SimBackend>(config.sim);
  }
  if (name == "cuda") {
    if (auto backend = make_cuda(config, why)) return backend;
    throw std::runtime_error("cannot start the cuda backend: " + why);
  }
  if (name.starts_with(kPluginPrefix)) {
    const std::string path = name.substr(kPluginPrefix.size());
    if (auto backend = load_plugin_backend(path, config.plugin_config, why)) return backend;
    throw std::runtime_error(why);
  }
  throw std::runtime_error("unknown backend '" + name + "' (choose auto, cpu, sim, cuda or plugin:PATH)");
}

}  // namespace batchd

// The cuda backend on a real GPU: answers bit-identical to the CPU reference, lanes used
// concurrently, batch limits and shutdown. On a machine without a GPU it prints why and exits 77,
// which meson reports as skipped; any other CUDA error fails it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "kernels/cuda_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "tests/cuda/cuda_test_inputs.hpp"
#include "tests/doctest_expected.hpp"

namespace {

using batchd::cuda_test::FlatBatch;
using batchd::cuda_test::random_input;

constexpr int kExitSkipped = 77;

std::unique_ptr<batchd::Backend> make_backend(unsigned cost, std::uint32_t max_batch = 256) {
  batchd::CudaBackendOptions options;
  options.cost = cost;
  options.max_batch = max_batch;
  options.max_batch_bytes = 4u << 20;
  auto backend = batchd::make_cuda_backend(options);
  REQUIRE(backend);
  return std::move(*backend);
}

FlatBatch random_batch(std::mt19937_64& rng, std::size_t count, std::size_t max_length) {
  FlatBatch batch;
  for (std::size_t i = 0; i < count; ++i) batch.add(random_input(rng, rng() % (max_length + 1)));
  return batch;
}

// Runs `batch` on `lane` and checks every answer against the CPU reference.
void check_batch(batchd::Backend& backend, batchd::LaneId lane, const FlatBatch& batch,
                 unsigned cost) {
  const batchd::BatchInput in = batch.view();
  batchd::BatchOutput out;
  const batchd::BackendStatus status = backend.run(lane, in, out);
  INFO("run: " << status.message);
  REQUIRE(status.ok);
  REQUIRE(out.size() == in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    REQUIRE_MESSAGE(out.at(i) == batchd::reference_batchstring(in.at(i), cost),
                    "input " << i << " of " << in.at(i).size() << " bytes");
  }
}

}  // namespace

TEST_CASE("answers match the reference for random inputs of 0..4096 bytes, costs 1 and 3") {
  for (const unsigned cost : {1U, 3U}) {
    auto backend = make_backend(cost);
    std::mt19937_64 rng(cost);
    for (int round = 0; round < 8; ++round) {
      const std::size_t count = round == 0 ? 1 : 1 + rng() % 256;
      check_batch(*backend, {0, static_cast<unsigned>(round) % backend->streams_per_device()},
                  random_batch(rng, count, 4096), cost);
    }
  }
}

TEST_CASE("two streams of one device run batches concurrently") {
  auto backend = make_backend(1, 64);
  REQUIRE(backend->streams_per_device() >= 2);
  auto worker = [&backend](unsigned stream) {
    std::mt19937_64 rng(100 + stream);
    for (int i = 0; i < 50; ++i) check_batch(*backend, {0, stream}, random_batch(rng, 64, 512), 1);
  };
  std::thread second(worker, 1U);
  worker(0);
  second.join();
}

TEST_CASE("every visible device answers") {
  auto backend = make_backend(2);
  std::mt19937_64 rng(7);
  for (unsigned device = 0; device < backend->devices(); ++device) {
    check_batch(*backend, {device, 0}, random_batch(rng, 32, 300), 2);
  }
}

TEST_CASE("every device reports its memory (cudaMemGetInfo), from a thread that runs no lane") {
  auto backend = make_backend(1);
  std::thread watchdog([&] {
    for (unsigned device = 0; device < backend->devices(); ++device) {
      const batchd::DeviceMemory memory = backend->memory(device);
      CHECK(memory.total_bytes > 0);
      CHECK(memory.free_bytes > 0);
      CHECK(memory.free_bytes <= memory.total_bytes);
      CHECK(memory.batch_bytes == 0);
    }
  });
  watchdog.join();
}

TEST_CASE("a window of a larger batch (first offset not 0) is hashed from its own bytes") {
  auto backend = make_backend(1);
  std::mt19937_64 rng(8);
  const FlatBatch whole = random_batch(rng, 10, 100);
  const batchd::BatchInput window{whole.view().bytes, {whole.offsets.data() + 4, 4}};
  batchd::BatchOutput out;
  REQUIRE(backend->run({0, 0}, window, out).ok);
  REQUIRE(out.size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(out.at(i) == batchd::reference_batchstring(window.at(i), 1));
}

TEST_CASE("a batch over the limits fails with a reason, and the lane keeps working") {
  auto backend = make_backend(1, 8);
  std::mt19937_64 rng(9);
  batchd::BatchOutput out;
  const batchd::BackendStatus too_many = backend->run({0, 0}, random_batch(rng, 9, 10).view(), out);
  CHECK_FALSE(too_many.ok);
  CHECK(too_many.message.find("--max-batch") != std::string::npos);
  FlatBatch huge;
  huge.add(std::string((4u << 20) + 1, 'x'));
  const batchd::BackendStatus too_big = backend->run({0, 0}, huge.view(), out);
  CHECK_FALSE(too_big.ok);
  CHECK(too_big.message.find("--max-batch-bytes") != std::string::npos);
  check_batch(*backend, {0, 0}, random_batch(rng, 8, 100), 1);
}

TEST_CASE("an empty batch and a bad lane") {
  auto backend = make_backend(1);
  batchd::BatchOutput out;
  CHECK(backend->run({0, 0}, FlatBatch{}.view(), out).ok);
  CHECK(out.size() == 0);
  CHECK_FALSE(backend->run({backend->devices(), 0}, FlatBatch{}.view(), out).ok);
  CHECK_FALSE(backend->run({0, backend->streams_per_device()}, FlatBatch{}.view(), out).ok);
}

TEST_CASE("after shutdown, run() fails at once") {
  auto backend = make_backend(1);
  backend->shutdown();
  std::mt19937_64 rng(10);
  batchd::BatchOutput out;
  const batchd::BackendStatus status = backend->run({0, 0}, random_batch(rng, 4, 10).view(), out);
  CHECK_FALSE(status.ok);
  CHECK(status.message.find("shutting down") != std::string::npos);
}

TEST_CASE("unknown or repeated device ordinals are refused") {
  batchd::CudaBackendOptions options;
  options.devices = {1000};
  auto backend = batchd::make_cuda_backend(options);
  REQUIRE_FALSE(backend);
  CHECK(backend.error().message.find("does not exist") != std::string::npos);
  options.devices = {0, 0};
  backend = batchd::make_cuda_backend(options);
  REQUIRE_FALSE(backend);
  CHECK(backend.error().message.find("twice") != std::string::npos);
}

namespace {

// True where the machine has no GPU to test, as opposed to a GPU the runtime cannot use (a driver
// too old for this runtime, a device in a bad state), which must fail rather than skip.
bool no_gpu_here(cudaError_t err, int count) {
  if (err == cudaSuccess) return count == 0;
  if (err == cudaErrorNoDevice) return true;
  // Without the driver's library the runtime says "insufficient driver" too; with it, the driver
  // really is too old.
  return err == cudaErrorInsufficientDriver && ::dlopen("libcuda.so.1", RTLD_LAZY) == nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    const auto counted = batchd::cuda_device_count();
    const std::string why = counted ? "no device" : counted.error().message;
    if (!no_gpu_here(err, count)) {
      std::printf("FAILED: %s (only a machine without a GPU driver, or without a device, skips)\n",
                  why.c_str());
      return 1;
    }
    std::printf("skipped: %s\n", why.c_str());
    return kExitSkipped;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

// The cuda backend's host logic against a fake CUDA runtime (fake_cuda_runtime.cpp): runs on
// any machine. The real runtime and kernel are covered by test_cuda_backend.cpp on a GPU.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "kernels/cuda_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "tests/cuda/cuda_test_inputs.hpp"
#include "tests/cuda/fake_cuda_runtime.hpp"
#include "tests/doctest_expected.hpp"

namespace {

using batchd::cuda_test::FlatBatch;
using batchd::cuda_test::random_input;

batchd::CudaBackendOptions small_options(unsigned cost = 1) {
  batchd::CudaBackendOptions options;
  options.cost = cost;
  options.max_batch = 64;
  options.max_batch_bytes = 64 * 4096;
  return options;
}

std::unique_ptr<batchd::Backend> make_backend(const batchd::CudaBackendOptions& options) {
  auto backend = batchd::make_cuda_backend(options);
  REQUIRE(backend);
  return std::move(*backend);
}

// Why making the backend failed; fails the test if it did not.
batchd::Failure refusal(const batchd::CudaBackendOptions& options) {
  const auto backend = batchd::make_cuda_backend(options);
  REQUIRE_FALSE(backend);
  return backend.error();
}

FlatBatch random_batch(std::mt19937_64& rng, std::size_t count, std::size_t max_length) {
  FlatBatch batch;
  for (std::size_t i = 0; i < count; ++i) batch.add(random_input(rng, rng() % (max_length + 1)));
  return batch;
}

void check_answers(const batchd::BatchInput& in, const batchd::BatchOutput& out, unsigned cost) {
  REQUIRE(out.size() == in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    REQUIRE(out.at(i) == batchd::reference_batchstring(in.at(i), cost));
  }
}

}  // namespace

TEST_CASE("batches are staged, hashed and collected in order, with event polling") {
  for (const unsigned cost : {1U, 3U}) {
    fake_cuda::reset().polls_before_ready = 5;
    auto backend = make_backend(small_options(cost));
    CHECK(backend->name() == "cuda");
    CHECK(backend->devices() == 1);
    CHECK(backend->streams_per_device() == 2);
    std::mt19937_64 rng(cost);
    batchd::BatchOutput out;
    for (int i = 0; i < 10; ++i) {
      const FlatBatch batch = random_batch(rng, 1 + rng() % 64, 4096);
      REQUIRE(backend->run({0, static_cast<unsigned>(i % 2)}, batch.view(), out).ok);
      check_answers(batch.view(), out, cost);
    }
  }
}

TEST_CASE("a window of a larger batch is rebased onto its own bytes") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  std::mt19937_64 rng(4);
  const FlatBatch whole = random_batch(rng, 10, 100);
  const batchd::BatchInput window{whole.view().bytes, {whole.offsets.data() + 3, 5}};
  batchd::BatchOutput out;
  REQUIRE(backend->run({0, 1}, window, out).ok);
  check_answers(window, out, 1);
}

TEST_CASE("the pinned block fits its lanes for small and large limits") {
  fake_cuda::reset();
  batchd::CudaBackendOptions options;
  options.max_batch = 1;
  options.max_batch_bytes = 1;
  options.streams_per_device = 1;
  CHECK(make_backend(options)->streams_per_device() == 1);
  options.max_batch = 4096;
  options.max_batch_bytes = 64u << 20;
  options.streams_per_device = 8;
  auto backend = make_backend(options);
  std::mt19937_64 rng(5);
  const FlatBatch batch = random_batch(rng, 4096, 64);
  batchd::BatchOutput out;
  REQUIRE(backend->run({0, 7}, batch.view(), out).ok);
  check_answers(batch.view(), out, 1);
}

TEST_CASE("lanes run concurrently from two threads") {
  fake_cuda::reset().polls_before_ready = 2;
  auto backend = make_backend(small_options());
  auto worker = [&backend](unsigned stream) {
    std::mt19937_64 rng(50 + stream);
    batchd::BatchOutput out;
    for (int i = 0; i < 30; ++i) {
      const FlatBatch batch = random_batch(rng, 64, 300);
      REQUIRE(backend->run({0, stream}, batch.view(), out).ok);
      check_answers(batch.view(), out, 1);
    }
  };
  std::thread second(worker, 1U);
  worker(0);
  second.join();
}

TEST_CASE("batches over the limits or with broken offsets fail without reaching the device") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  const int launches = fake_cuda::control().launches;
  std::mt19937_64 rng(6);
  batchd::BatchOutput out;
  const auto too_many = backend->run({0, 0}, random_batch(rng, 65, 4).view(), out);
  CHECK(too_many.message.find("--max-batch 64") != std::string::npos);
  FlatBatch too_big;
  too_big.add(std::string(64 * 4096 + 1, 'z'));
  CHECK(backend->run({0, 0}, too_big.view(), out).message.find("--max-batch-bytes") !=
        std::string::npos);
  const std::vector<char> bytes(10, 'a');
  const std::vector<std::uint32_t> decreasing{0, 6, 3};
  CHECK(backend->run({0, 0}, {{bytes}, {decreasing}}, out).message.find("decrease") !=
        std::string::npos);
  const std::vector<std::uint32_t> past_end{0, 11};
  CHECK(backend->run({0, 0}, {{bytes}, {past_end}}, out).message.find("past") != std::string::npos);
  CHECK(fake_cuda::control().launches == launches);
  CHECK(out.size() == 0);
}

TEST_CASE("a sticky device error fails the batch with the CUDA error text, and every later one") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  std::mt19937_64 rng(7);
  fake_cuda::control().sticky_error = cudaErrorIllegalAddress;
  batchd::BatchOutput out;
  const auto first = backend->run({0, 0}, random_batch(rng, 4, 10).view(), out);
  CHECK_FALSE(first.ok);
  CHECK(first.message.find("an illegal memory access was encountered (cudaErrorIllegalAddress)") !=
        std::string::npos);
  CHECK_FALSE(backend->run({0, 1}, random_batch(rng, 4, 10).view(), out).ok);
}

TEST_CASE("shutdown() ends a wait for a batch that never completes") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  fake_cuda::control().never_ready = true;
  std::mt19937_64 rng(8);
  const FlatBatch batch = random_batch(rng, 4, 10);
  batchd::BackendStatus status;
  std::thread runner([&] {
    batchd::BatchOutput out;
    status = backend->run({0, 0}, batch.view(), out);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto asked = std::chrono::steady_clock::now();
  backend->shutdown();
  runner.join();
  CHECK(std::chrono::steady_clock::now() - asked < std::chrono::seconds(1));
  CHECK_FALSE(status.ok);
  CHECK(status.message.find("shutting down") != std::string::npos);
  batchd::BatchOutput out;
  CHECK(backend->run({0, 1}, batch.view(), out).message.find("shutting down") != std::string::npos);
  fake_cuda::control().never_ready = false;  // the destructor's stream waits then finish
}

TEST_CASE("chosen devices map to lanes in the order given") {
  fake_cuda::reset().device_count = 3;
  batchd::CudaBackendOptions options = small_options();
  options.devices = {2, 0};
  auto backend = make_backend(options);
  REQUIRE(backend->devices() == 2);
  std::mt19937_64 rng(9);
  batchd::BatchOutput out;
  REQUIRE(backend->run({0, 0}, random_batch(rng, 2, 10).view(), out).ok);
  CHECK(fake_cuda::control().last_launch_device == 2);
  REQUIRE(backend->run({1, 1}, random_batch(rng, 2, 10).view(), out).ok);
  CHECK(fake_cuda::control().last_launch_device == 0);
  CHECK_FALSE(backend->run({2, 0}, random_batch(rng, 2, 10).view(), out).ok);
}

TEST_CASE("start-up refuses missing devices, a broken kernel and no driver, saying why") {
  fake_cuda::reset().device_count = 2;
  batchd::CudaBackendOptions options = small_options();
  options.devices = {2};
  batchd::Failure failure = refusal(options);
  CHECK(failure.message == "cuda device 2 does not exist (2 visible)");
  CHECK(failure.code == std::errc::no_such_device);
  options.devices = {1, 1};
  failure = refusal(options);
  CHECK(failure.message == "cuda device 1 is listed twice");
  CHECK(failure.code == std::errc::invalid_argument);

  fake_cuda::reset().corrupt_answers = true;
  failure = refusal(small_options());
  CHECK(failure.message == "cuda device 0 self-test: wrong answer from the kernel");
  CHECK(failure.code == std::errc::io_error);

  fake_cuda::reset().device_count_error = cudaErrorInsufficientDriver;
  const auto no_driver = batchd::cuda_device_count();
  REQUIRE_FALSE(no_driver);
  CHECK(no_driver.error().message.find("CUDA driver version is insufficient") != std::string::npos);
  CHECK(refusal(small_options()).message.find("no NVIDIA GPU or driver") != std::string::npos);

  fake_cuda::reset().device_count = 0;
  const auto none = batchd::cuda_device_count();
  REQUIRE_FALSE(none);
  CHECK(none.error().code == std::errc::no_such_device);
  CHECK(none.error().message.find("no CUDA device is visible") != std::string::npos);
}

TEST_CASE("memory() is cudaMemGetInfo on the lane's device; a batch needs none of its own") {
  fake_cuda::Control& control = fake_cuda::reset();
  control.device_count = 3;
  control.memory_total[0] = 80ULL << 30;
  control.memory_free[0] = 50ULL << 30;
  control.memory_total[2] = 141ULL << 30;
  control.memory_free[2] = 7ULL << 30;
  batchd::CudaBackendOptions options = small_options();
  options.devices = {2, 0};
  auto backend = make_backend(options);
  const batchd::DeviceMemory first = backend->memory(0);  // ordinal 2
  CHECK(first.total_bytes == 141ULL << 30);
  CHECK(first.free_bytes == 7ULL << 30);
  CHECK(first.batch_bytes == 0);
  const batchd::DeviceMemory second = backend->memory(1);  // ordinal 0
  CHECK(second.total_bytes == 80ULL << 30);
  CHECK(second.free_bytes == 50ULL << 30);
  CHECK(backend->memory(2).total_bytes == 0);  // no such device: not reported
  CHECK(backend->batch_memory_bytes(64, 64 * 4096) == 0);  // buffers are made at start
  // A runtime that cannot answer reports nothing rather than a made-up reading.
  fake_cuda::control().memory_error = cudaErrorInvalidValue;
  CHECK(backend->memory(0).total_bytes == 0);
}

TEST_CASE("a failed copy's error is not reported again by the next batch's launch") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  std::mt19937_64 rng(9);
  batchd::BatchOutput out;
  fake_cuda::control().fail_next_copy = cudaErrorInvalidValue;
  const auto failed = backend->run({0, 0}, random_batch(rng, 4, 10).view(), out);
  CHECK_FALSE(failed.ok);
  CHECK(failed.message.find("copy of the batch to the device: invalid argument") !=
        std::string::npos);
  // Same thread, same lane: the runtime still holds the copy's error for cudaGetLastError.
  const FlatBatch next = random_batch(rng, 4, 10);
  const auto status = backend->run({0, 0}, next.view(), out);
  CHECK_MESSAGE(status.ok, status.message);
  check_answers(next.view(), out, 1);
  CHECK_FALSE(backend->device_lost(0));
}

TEST_CASE("a sticky error loses its device for good; other devices go on") {
  fake_cuda::reset().device_count = 2;
  auto backend = make_backend(small_options());
  std::mt19937_64 rng(10);
  batchd::BatchOutput out;
  fake_cuda::control().device_sticky_error[1] = cudaErrorLaunchFailure;
  CHECK_FALSE(backend->run({1, 0}, random_batch(rng, 4, 10).view(), out).ok);
  CHECK(backend->device_lost(1));
  CHECK_FALSE(backend->device_lost(0));
  const FlatBatch batch = random_batch(rng, 4, 10);
  REQUIRE(backend->run({0, 1}, batch.view(), out).ok);
  check_answers(batch.view(), out, 1);
  // Even where the runtime would answer again, the lost device takes no batch: its context is
  // gone, and a real runtime would keep failing.
  fake_cuda::control().device_sticky_error[1] = cudaSuccess;
  const int launches = fake_cuda::control().launches;
  const auto again = backend->run({1, 1}, batch.view(), out);
  CHECK_FALSE(again.ok);
  CHECK(again.message.find("cuda device 1 is lost until batchd restarts") != std::string::npos);
  CHECK(fake_cuda::control().launches == launches);
  CHECK(backend->device_lost(1));
}

TEST_CASE("errors that do not corrupt the context do not lose the device") {
  fake_cuda::reset();
  auto backend = make_backend(small_options());
  std::mt19937_64 rng(11);
  batchd::BatchOutput out;
  fake_cuda::control().sticky_error = cudaErrorInvalidValue;
  CHECK_FALSE(backend->run({0, 0}, random_batch(rng, 2, 10).view(), out).ok);
  CHECK_FALSE(backend->device_lost(0));
  fake_cuda::control().sticky_error = cudaErrorIllegalAddress;
  CHECK_FALSE(backend->run({0, 0}, random_batch(rng, 2, 10).view(), out).ok);
  CHECK(backend->device_lost(0));
}

TEST_CASE("the worst batch time follows the cost; the self-test does not") {
  fake_cuda::reset();
  auto cheap = make_backend(small_options(1));
  // The daemon's default --device-timeout-ms is 2000: a default configuration keeps it.
  CHECK(cheap->worst_batch_time() > std::chrono::nanoseconds(0));
  CHECK(cheap->worst_batch_time() < std::chrono::seconds(2));
  const int launches = fake_cuda::control().launches;
  auto costly = make_backend(small_options(1'000'000));
  CHECK(costly->worst_batch_time() > std::chrono::seconds(2));
  CHECK(costly->worst_batch_time() > 100 * cheap->worst_batch_time());
  // One self-test launch per lane, each at two rounds rather than a million.
  CHECK(fake_cuda::control().launches == launches + 2);
  CHECK(fake_cuda::control().last_launch_cost == 2);
}

TEST_CASE("launches are shaped for the device: one warp per block until the SMs' block slots run out") {
  using batchd::kernels::LaunchShape;
  using batchd::kernels::threads_per_block;
  const LaunchShape h200{132, 32, 1024, 135'168};
  CHECK(threads_per_block(0, h200) == 32);
  CHECK(threads_per_block(1, h200) == 32);
  CHECK(threads_per_block(4096, h200) == 32);
  CHECK(threads_per_block(132 * 32 * 32, h200) == 32);  // one warp in every block slot
  CHECK(threads_per_block(132 * 32 * 32 + 1, h200) == 64);
  CHECK(threads_per_block(1U << 20, h200) == 256);  // 32,768 warps over 4,224 slots
  // Never past the kernel's own limit, in whole warps.
  CHECK(threads_per_block(1U << 20, LaunchShape{2, 1, 100, 192}) == 96);
  CHECK(threads_per_block(1U << 20, LaunchShape{0, 0, 0, 0}) == 32);
}

TEST_CASE("a backend asked to fill its devices sizes each stream's batches from the occupancy") {
  auto& control = fake_cuda::reset();
  control.shape = {4, 8, 1024, 4096};
  batchd::CudaBackendOptions options = small_options();
  options.max_batch_fills_devices = true;
  auto filling = make_backend(options);
  // 4,096 resident threads over 2 streams; max_batch (64) was only a floor.
  CHECK(filling->capacity().max_inputs == 2048);
  CHECK(filling->capacity().fill_inputs == 2048);
  std::mt19937_64 rng(31);
  const FlatBatch batch = random_batch(rng, 2048, 40);
  batchd::BatchOutput out;
  REQUIRE(filling->run({0, 1}, batch.view(), out).ok);
  check_answers(batch.view(), out, 1);
  // 64 warps over 32 block slots: two warps a block.
  CHECK(control.last_launch_threads_per_block.load() == 64);

  SUBCASE("told a batch size, the backend keeps it and still says what would fill") {
    options.max_batch_fills_devices = false;
    auto told = make_backend(options);
    CHECK(told->capacity().max_inputs == 64);
    CHECK(told->capacity().fill_inputs == 2048);
  }
  SUBCASE("whole warps, and at most kMaxFillBatch") {
    control.shape.resident_threads = 1000;
    options.streams_per_device = 3;
    CHECK(make_backend(options)->capacity().max_inputs == 352);  // 334 rounded up to warps
    control.shape.resident_threads = 10'000'000;
    CHECK(make_backend(options)->capacity().max_inputs == batchd::kMaxFillBatch);
  }
  SUBCASE("a device whose occupancy cannot be read does not start") {
    control.shape_error = cudaErrorInvalidDeviceFunction;
    const batchd::Failure why = refusal(options);
    CHECK(why.code == std::errc::io_error);
    CHECK(why.message.find("occupancy") != std::string::npos);
  }
}

TEST_CASE("an H200 filled at the default byte budget keeps the daemon's 2 s device timeout") {
  fake_cuda::reset().shape = {132, 32, 1024, 135'168};
  batchd::CudaBackendOptions options;  // 2 streams, 8 MiB a batch
  options.max_batch = 256;
  options.max_batch_fills_devices = true;
  auto cheap = make_backend(options);
  CHECK(cheap->capacity().max_inputs == batchd::kMaxFillBatch);
  CHECK(cheap->worst_batch_time() < std::chrono::seconds(2));
  options.cost = 1000;
  CHECK(make_backend(options)->worst_batch_time() < std::chrono::seconds(2));
  // 65,536 inputs x 2,000,000 blocks: seconds even on a full H200.
  options.cost = 1'000'000;
  CHECK(make_backend(options)->worst_batch_time() > std::chrono::seconds(10));
}

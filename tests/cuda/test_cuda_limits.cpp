// The batch limits have one source of truth: the cuda backend sizes its pinned and device buffers
// at start and states that capacity; the daemon clamps its policy to it at start and on every
// reload (SIGHUP ends in Daemon::update_limits), so a larger policy never sends batches down the
// failure path. The backend runs against the fake CUDA runtime, so this runs without a GPU.
#include <doctest/doctest.h>

#include <atomic>

#include "backend/reference_batchstring.hpp"
#include "client_lib/client.hpp"
#include "kernels/cuda_backend.hpp"
#include "tests/cuda/fake_cuda_runtime.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

TEST_CASE("a policy past the cuda backend's buffers is clamped to them, at start and on reload") {
  fake_cuda::reset();
  // 7 inputs: the status page's batch-size buckets are [4, 7], [8, 15], ..., so any batch
  // larger than the buffers would show in a bucket of its own.
  CudaBackendOptions options;
  options.max_batch = 7;
  options.max_batch_bytes = 7 * 1024;
  auto made = make_cuda_backend(options);
  REQUIRE(made);
  std::unique_ptr<Backend> backend = std::move(*made);
  CHECK(backend->capacity().max_inputs == 7);
  CHECK(backend->capacity().max_bytes == 7 * 1024);

  DaemonConfig config;
  config.socket_path = test::temp_socket_path();
  config.backend = "cuda";
  config.segment = shm::SegmentParams{1024, 1024, 1024};  // inputs fit the buffers' byte budget
  config.batch.max_batch = 64;  // more than the buffers: cut at start
  config.batch.max_batch_bytes = 1 << 20;
  config.batch.max_wait = 5ms;
  test::InProcessDaemon daemon(config, std::move(backend));
  auto client = test::connect(daemon.socket_path());
  DaemonStatus status = client->daemon_status();
  CHECK(status.max_batch == 7);
  CHECK(status.max_batch_bytes == 7 * 1024);

  // A reload that raises every limit: the wait changes, the sizes stay within the buffers.
  daemon.update_limits(BatchLimits{128, 20ms, 1 << 22});
  REQUIRE(test::eventually([&] { return client->daemon_status().max_wait_ns == 20'000'000; }, 5s));
  status = client->daemon_status();
  CHECK(status.max_batch == 7);
  CHECK(status.max_batch_bytes == 7 * 1024);

  const int requests = static_cast<int>(test::scaled(400, 100));
  std::atomic<int> answered{0}, correct{0};
  for (int i = 0; i < requests; ++i) {
    const std::string input = "clamped " + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 30s, [&, input](Result&& r) {
      if (r.ok() && r.output() == reference_batchstring(input, 1)) correct.fetch_add(1);
      answered.fetch_add(1);
    }).has_value());
  }
  REQUIRE(test::eventually([&] { client->poll(); return answered.load() == requests; }, 30s));
  CHECK(correct.load() == requests);
  CHECK(daemon.stats().batch_failures.load() == 0);
  // The status page is published every few tens of milliseconds.
  REQUIRE(test::eventually([&] { return client->daemon_status().requests_ok >= static_cast<std::uint64_t>(requests); }, 5s));
  status = client->daemon_status();
  REQUIRE(status.batch_sizes.size() > 3);
  std::uint64_t within = 0, beyond = 0;
  for (std::size_t b = 0; b < status.batch_sizes.size(); ++b) (b < 3 ? within : beyond) += status.batch_sizes[b];
  CHECK(within > 0);
  CHECK(beyond == 0);
}

// Not told a batch size, the adaptive daemon takes the ceiling from the GPU: at a high cost a
// device is kept busy only by many inputs at once, far more than the 256 a CPU-sized ceiling
// allows.
TEST_CASE("without --max-batch the ceiling is what fills the GPU, at start and on reload") {
  auto& control = fake_cuda::reset();
  control.shape = {4, 16, 1024, 1024};  // 1,024 resident threads: 512 a stream
  control.polls_before_ready = 200;    // batches take a while, so a burst queues behind them
  DaemonConfig config;
  config.socket_path = test::temp_socket_path();
  config.backend = "cuda";
  config.segment = shm::SegmentParams{4096, 1024, 1024};
  config.batch.max_batch = kAdaptiveDefaultMaxBatch;
  config.batch.max_batch_from_backend = true;
  CudaBackendOptions options;
  options.max_batch = config.batch.max_batch;
  options.max_batch_fills_devices = true;
  auto made = make_cuda_backend(options);
  REQUIRE(made);
  test::InProcessDaemon daemon(config, std::move(*made));
  auto client = test::connect(daemon.socket_path());
  CHECK(client->daemon_status().max_batch == 512);

  // A burst larger than the old ceiling while the lanes are busy: batches grow past 256, never
  // past the fill.
  const int requests = 3000;
  std::atomic<int> answered{0}, correct{0};
  for (int i = 0; i < requests; ++i) {
    const std::string input = "fill " + std::to_string(i);
    REQUIRE_FALSE(client->submit_async(input, 60s, [&, input](Result&& r) {
      if (r.ok() && r.output() == reference_batchstring(input, 1)) correct.fetch_add(1);
      answered.fetch_add(1);
    }).has_value());
  }
  REQUIRE(test::eventually([&] { client->poll(); return answered.load() == requests; }, 60s));
  CHECK(correct.load() == requests);
  CHECK(control.largest_launch.load() > kAdaptiveDefaultMaxBatch);
  CHECK(control.largest_launch.load() <= 512);

  // A reload still without a batch size keeps the GPU's ceiling; one with a size takes it.
  BatchLimits reloaded = config.batch;
  reloaded.max_wait = 20ms;
  daemon.update_limits(reloaded);
  REQUIRE(test::eventually([&] { return client->daemon_status().max_wait_ns == 20'000'000; }, 5s));
  CHECK(client->daemon_status().max_batch == 512);
  reloaded.max_batch = 100;
  reloaded.max_batch_from_backend = false;
  daemon.update_limits(reloaded);
  REQUIRE(test::eventually([&] { return client->daemon_status().max_batch == 100; }, 5s));
}

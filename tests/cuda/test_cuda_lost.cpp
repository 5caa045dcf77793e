// After a sticky CUDA error a device is lost for good (its context is corrupt). The daemon routes
// around a lost device; once every device is lost it exits (main returns kExitAllDevicesLost, on
// which systemd restarts it) without answering what it holds, and the clients send those
// requests again to the next daemon. The backend runs against the fake CUDA runtime, so this runs
// without a GPU.
#include <doctest/doctest.h>

#include <atomic>

#include "backend/reference_batchstring.hpp"
#include "client_lib/client.hpp"
#include "kernels/cuda_backend.hpp"
#include "tests/cuda/fake_cuda_runtime.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

std::unique_ptr<Backend> fake_gpus(int count) {
  fake_cuda::reset().device_count = count;
  auto made = make_cuda_backend(CudaBackendOptions{});
  REQUIRE(made);
  return std::move(*made);
}

DaemonConfig config_for(const std::string& socket) {
  DaemonConfig config;
  config.socket_path = socket;
  config.backend = "cuda";
  config.batch.max_wait = 1ms;
  return config;
}

}  // namespace

TEST_CASE("a lost device is routed around; when all are lost the daemon exits for a restart") {
  const std::string socket = test::temp_socket_path();
  auto daemon = std::make_unique<test::InProcessDaemon>(config_for(socket), fake_gpus(2));
  auto client = test::connect(daemon->socket_path());
  auto ask = [&](const std::string& input) {
    const Result r = client->submit(input, 10s);
    return r.ok() && r.output() == reference_batchstring(input, 1);
  };
  CHECK(ask("before"));

  fake_cuda::control().device_sticky_error[0] = cudaErrorIllegalAddress;
  // Whichever device each runs on, every request is answered, and device 0 ends up lost.
  for (int i = 0; i < 20; ++i) CHECK(ask("one lost " + std::to_string(i)));
  REQUIRE(test::eventually([&] { return daemon->devices()[0]->state() == DeviceState::kLost; }, 5s));
  CHECK(daemon->devices()[1]->state() == DeviceState::kHealthy);
  CHECK_FALSE(daemon->finished());
  CHECK(ask("still served"));

  fake_cuda::control().device_sticky_error[1] = cudaErrorIllegalAddress;
  std::atomic<int> answered{0};
  std::atomic<bool> correct{false};
  const std::string input = "across the restart";
  REQUIRE_FALSE(client->submit_async(input, 60s, [&](Result&& r) {
    correct.store(r.ok() && r.output() == reference_batchstring(input, 1));
    answered.fetch_add(1);
  }).has_value());
  REQUIRE(test::eventually([&] { client->poll(); return daemon->finished(); }, 10s));
  CHECK(daemon->all_devices_lost());
  CHECK(answered.load() == 0);  // not failed: the request waits for the next daemon

  // What systemd does on the exit status: a new daemon on the same socket, with working GPUs.
  daemon.reset();
  daemon = std::make_unique<test::InProcessDaemon>(config_for(socket), fake_gpus(2));
  REQUIRE(test::eventually([&] { client->poll(); return answered.load() == 1; }, 30s));
  CHECK(correct.load());
  CHECK_FALSE(daemon->all_devices_lost());
}

TEST_CASE("a costly configuration raises the hang timeout instead of failing a healthy device") {
  // A byte budget whose single-thread hash the backend estimates at seconds: the configured
  // 50 ms timeout would call a batch held 300 ms hung.
  fake_cuda::reset();
  CudaBackendOptions options;
  options.max_batch_bytes = 64u << 20;
  auto made = make_cuda_backend(options);
  REQUIRE(made);
  REQUIRE((*made)->worst_batch_time() > 1s);
  DaemonConfig config = config_for(test::temp_socket_path());
  config.routing.device_timeout = 50ms;
  test::InProcessDaemon daemon(config, std::move(*made));
  auto client = test::connect(daemon.socket_path());
  fake_cuda::control().never_ready = true;  // the "GPU" is busy with the batch
  std::atomic<int> answered{0};
  std::atomic<bool> correct{false};
  REQUIRE_FALSE(client->submit_async("slow", 60s, [&](Result&& r) {
    correct.store(r.ok() && r.output() == reference_batchstring("slow", 1));
    answered.fetch_add(1);
  }).has_value());
  std::this_thread::sleep_for(300ms);
  fake_cuda::control().never_ready = false;
  REQUIRE(test::eventually([&] { client->poll(); return answered.load() == 1; }, 30s));
  CHECK(correct.load());
  CHECK(daemon.devices()[0]->timeouts() == 0);
}

// Warm-up (RouterOptions::warmup): a model whose devices pay a lazy initialisation on their first
// batch (the sim backend's --sim-cold-ms) says "warming", not ready, until each device ran its
// warm-up batches; its first real request then costs what a steady one does, and its cost fit is
// seeded before any request. Requests that come meanwhile wait rather than fail, and a load warms
// the model again.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/sim_reference.hpp"
#include "client_lib/client.hpp"
#include "client_lib/daemon_readiness.hpp"
#include "daemon/options.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// Two sim devices of 5 ms batches whose first batch takes 400 ms more.
std::vector<std::string> cold_sim(std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--backend",   "sim", "--sim-devices",   "2",     "--sim-fixed-us", "5000",
                                "--sim-cold-ms", "400", "--max-wait-ms", "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::optional<DaemonStatus::Model> model_named(const Client& client, const std::string& name) {
  for (const DaemonStatus::Model& model : client.daemon_status().models) {
    if (model.name == name) return model;
  }
  return std::nullopt;
}

bool state_is(const Client& client, const std::string& name, const std::string& state) {
  return test::eventually([&] {
    const std::optional<DaemonStatus::Model> model = model_named(client, name);
    return model && model->state == state;
  }, test::grace(10s));
}

double seconds_since(std::chrono::steady_clock::time_point from) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

// One request's round trip, checked.
double timed_request(Client& client, const std::string& input, const RequestOptions& options = {}) {
  const auto from = std::chrono::steady_clock::now();
  const Result r = client.submit(input, 10s, options);
  const double took = seconds_since(from);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(r.output() == sim_expected_output(input, 1));
  return took;
}

}  // namespace

TEST_CASE("warm-up settings: a [models.NAME.warmup] table, made-up inputs, and a model's lists replace the top's") {
  const std::string path = test::write_temp_file("warmup.toml",
                                                 "[warmup]\nbatch_sizes = [1, 4]\ncount = 3\n"
                                                 "[models.langid.warmup]\nbatch_sizes = [2, 16]\n"
                                                 "inputs = [\"Bonjour\", \"Hallo\"]\nrounds = 3\n"
                                                 "[models.plain]\ncost = 2\n");
  DaemonOptions options;
  std::string message;
  REQUIRE_MESSAGE(parse_daemon_options({"--config", path, "--model", R"(flag:warmup_batch_sizes="8,9")"}, options,
                                       message) == -1,
                  message);
  const WarmupOptions& top = options.config.routing.warmup;
  CHECK(top.batch_sizes == std::vector<std::uint32_t>{1, 4});
  CHECK(top.inputs == std::vector<std::string>{"batchd warm-up input 0", "batchd warm-up input 1",
                                               "batchd warm-up input 2"});
  CHECK(top.rounds == 2);
  REQUIRE(options.config.models.size() == 3);
  for (const ModelConfig& model : options.config.models) {
    CAPTURE(model.name);
    const WarmupOptions& warmup = model.settings.routing.warmup;
    if (model.name == "langid") {
      CHECK(warmup.batch_sizes == std::vector<std::uint32_t>{2, 16});  // not 1, 4, 2, 16
      CHECK(warmup.inputs == std::vector<std::string>{"Bonjour", "Hallo"});
      CHECK(warmup.rounds == 3);
    } else if (model.name == "plain") {
      CHECK(warmup.batch_sizes == top.batch_sizes);  // inherited
      CHECK(warmup.inputs.size() == 3);
    } else {
      CHECK(model.name == "flag");
      CHECK(warmup.batch_sizes == std::vector<std::uint32_t>{8, 9});
      CHECK(warmup.inputs.size() == 3);  // the top's count, and inputs made up to it
    }
  }
  // No sizes, no warm-up.
  CHECK_FALSE(DaemonConfig{}.routing.warmup.enabled());
  options = {};
  CHECK(parse_daemon_options({"--warmup-batch-sizes", "0"}, options, message) == 2);
}

TEST_CASE("a cold model is warming until its devices ran their warm-up; then its first request costs a steady one") {
  for (const bool warm : {true, false}) {
    CAPTURE(warm);
    const std::string socket = test::temp_socket_path();
    test::DaemonProcess daemon(socket, cold_sim(warm ? std::vector<std::string>{"--warmup-batch-sizes", "1,8"}
                                                     : std::vector<std::string>{}));
    std::unique_ptr<Client> client = test::connect(socket);
    if (warm) {
      // 4 batches a device, the first 400 ms: the page says so, and so does readiness.
      REQUIRE(state_is(*client, "batchstring", "warming"));
      const std::optional<NotReady> not_ready = daemon_not_ready(*client, 1 << 20);
      REQUIRE(not_ready.has_value());
      CHECK(not_ready->code == "warming");
      REQUIRE(state_is(*client, "batchstring", "ready"));
      CHECK_FALSE(daemon_not_ready(*client, 1 << 20).has_value());
      // The model is ready once one device is warm; the other finishes its warm-up meanwhile.
      // The cost fit learnt from the warm-up, past its two cold batches, before any request.
      DaemonStatus status;
      REQUIRE(test::eventually([&] {
        status = client->daemon_status();
        return status.devices.size() == 2 && status.devices[0].probes == 2 && status.devices[1].probes == 2;
      }, test::grace(10s)));
      for (const DaemonStatus::Device& device : status.devices) {
        CHECK(device.cost_samples >= 2);
        // Warm-up batches count as probes (nobody waits for them), past the two cold ones.
        CHECK(device.probes == 2);
        CHECK(device.batches_ok == 0);
        CHECK(device.batch_ns < 100'000'000);  // the measured batch time is not the cold one's
      }
      CHECK(status.models.front().requests_taken == 0);
    } else {
      REQUIRE(state_is(*client, "batchstring", "ready"));
    }
    const double first = timed_request(*client, "first");
    std::vector<double> steady;
    for (int i = 0; i < 21; ++i) steady.push_back(timed_request(*client, "steady " + std::to_string(i)));
    std::sort(steady.begin(), steady.end());
    const double p50 = steady[steady.size() / 2];
    MESSAGE(std::string(warm ? "warm-up on" : "warm-up off") << ": first request " << first * 1e3 << " ms, steady p50 "
                       << p50 * 1e3 << " ms");
    // Without the warm-up the first request pays a device's 400 ms: the check can fail.
    if (warm) {
      CHECK(first <= 2 * p50);
    } else {
      CHECK(first > 2 * p50);
    }
  }
}

TEST_CASE("a device that warms up beside one already warm runs its whole warm-up") {
  // Device 1 runs three times slower: device 0 is warm and taking requests first. A warming
  // device's unmeasured runs look stalled at once, and its queued warm-up must not be moved off
  // it (dropped, as probes are) because another device runs.
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, cold_sim({"--sim-slow", "1:3", "--warmup-batch-sizes", "1,8", "--warmup-rounds",
                                               "3"}));
  std::unique_ptr<Client> client = test::connect(socket);
  REQUIRE(state_is(*client, "batchstring", "ready"));
  DaemonStatus status;
  // 6 batches a device: 2 cold, 4 counted as probes (and no request, so no laggard's probe).
  const bool whole = test::eventually([&] {
    status = client->daemon_status();
    return status.devices.size() == 2 && status.devices[0].probes == 4 && status.devices[1].probes == 4;
  }, test::grace(10s));
  CHECK_MESSAGE(whole, "probes: ", status.devices.at(0).probes, " and ", status.devices.at(1).probes);
}

TEST_CASE("requests that come while every device warms up wait for it and are answered") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, cold_sim({"--warmup-batch-sizes", "4", "--warmup-rounds", "3"}));
  std::unique_ptr<Client> client = test::connect(socket);
  REQUIRE(state_is(*client, "batchstring", "warming"));
  std::vector<std::string> inputs;
  for (int i = 0; i < 20; ++i) inputs.push_back("early " + std::to_string(i));
  const auto from = std::chrono::steady_clock::now();
  const std::vector<std::string_view> views(inputs.begin(), inputs.end());
  const std::vector<Result> results = client->submit_many(views, 10s);
  const double took = seconds_since(from);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE_MESSAGE(results[i].ok(), results[i].error().message);
    CHECK(results[i].output() == sim_expected_output(inputs[i], 1));
  }
  MESSAGE("20 requests sent while warming were answered in " << took * 1e3 << " ms");
  CHECK(client->daemon_status().models.front().state == "ready");
}

TEST_CASE("a model warms up again when it is loaded; its warm-up inputs may be given") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1", "--model",
                                      "cold:backend=sim,sim_devices=1,sim_fixed_us=2000,sim_cold_ms=300,"
                                      "warmup_batch_sizes=\"1,2\",warmup_inputs=sample"});
  std::unique_ptr<Client> client = test::connect(socket);
  // The default model has no warm-up: ready at once, and the daemon's readiness is not held up
  // by another model's.
  REQUIRE(state_is(*client, "cold", "warming"));
  CHECK(model_named(*client, "batchstring")->state == "ready");
  CHECK_FALSE(daemon_not_ready(*client, 1 << 20).has_value());
  REQUIRE(state_is(*client, "cold", "ready"));
  const RequestOptions cold{Priority::kNormal, "cold"};
  CHECK(timed_request(*client, "after start", cold) < 0.2);

  ClientOptions options;
  options.socket_path = socket;
  Error error;
  REQUIRE_MESSAGE(control_model(options, "cold", ModelAction::kUnload, test::grace(30s), &error).has_value(),
                  error.message);
  REQUIRE_MESSAGE(control_model(options, "cold", ModelAction::kLoad, test::grace(30s), &error).has_value(),
                  error.message);
  // A new backend: its device is cold again, and warms before it is ready.
  REQUIRE(state_is(*client, "cold", "warming"));
  REQUIRE(state_is(*client, "cold", "ready"));
  CHECK(timed_request(*client, "after load", cold) < 0.2);
  daemon.stop();
}

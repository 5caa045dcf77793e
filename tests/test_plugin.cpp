// The plug-in backend (daemon/plugin_backend.hpp): the example plug-in against the reference,
// and every refusal and failure a broken plug-in can cause, at the Backend level. Meson sets
// BATCHD_EXAMPLE_PLUGIN and BATCHD_TEST_PLUGIN_DIR (tests/plugins/).
#include <doctest/doctest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon/plugin_backend.hpp"
#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"

namespace {

using batchd::Backend;
using batchd::BackendStatus;
using batchd::BatchOutput;
using batchd::LaneId;

std::string env_path(const char* name) {
  const char* value = std::getenv(name);
  REQUIRE_MESSAGE(value != nullptr, name << " is not set (meson test sets it)");
  return value;
}

std::string example_plugin() { return env_path("BATCHD_EXAMPLE_PLUGIN"); }
std::string test_plugin(const std::string& name) {
  return env_path("BATCHD_TEST_PLUGIN_DIR") + "/" + name + ".so";
}

// Owns the bytes a BatchInput views.
struct Inputs {
  std::vector<std::string> items;
  std::string bytes;
  std::vector<std::uint32_t> offsets{0};

  explicit Inputs(std::vector<std::string> all) : items(std::move(all)) {
    for (const std::string& item : items) {
      bytes += item;
      offsets.push_back(static_cast<std::uint32_t>(bytes.size()));
    }
  }
  [[nodiscard]] batchd::BatchInput view() const { return {bytes, offsets}; }
};

Inputs random_inputs(std::mt19937_64& rng, std::size_t count) {
  std::vector<std::string> items{""};  // the empty input is a valid one too
  std::uniform_int_distribution<std::size_t> bytes(0, 300);
  while (items.size() < count) items.push_back(batchd::test::random_utf8(rng, bytes(rng)));
  return Inputs(std::move(items));
}

std::unique_ptr<Backend> load(const std::string& path, const std::string& config) {
  auto backend = batchd::load_plugin_backend(path, config);
  REQUIRE(backend);
  REQUIRE(*backend != nullptr);
  return std::move(*backend);
}

constexpr std::errc kNotAPlugin = std::errc::executable_format_error;
constexpr std::errc kRefusedConfig = std::errc::invalid_argument;

// Loading must fail with `code`, and a message that names the path and contains `expected`.
void check_refused(const std::string& path, const std::string& config, std::errc code,
                   const std::string& expected) {
  const auto backend = batchd::load_plugin_backend(path, config);
  REQUIRE_FALSE(backend);
  const std::string why = backend.error().message;
  INFO("why: " << why);
  CHECK(backend.error().code == code);
  CHECK(why.find(path) != std::string::npos);
  CHECK(why.find(expected) != std::string::npos);
}

void check_reference(Backend& backend, LaneId lane, const Inputs& inputs, unsigned cost) {
  BatchOutput out;
  out.append(3);  // stale contents from an earlier batch must not survive
  const BackendStatus status = backend.run(lane, inputs.view(), out);
  REQUIRE_MESSAGE(status.ok, status.message);
  REQUIRE(out.size() == inputs.items.size());
  for (std::size_t i = 0; i < inputs.items.size(); ++i) {
    CHECK(out.at(i) == batchd::reference_batchstring(inputs.items[i], cost));
  }
}

}  // namespace

TEST_CASE("the example plug-in computes the reference batchstring on every lane") {
  auto backend = load(example_plugin(), "cost=3;devices=2;streams=2");
  CHECK(backend->name() == "example");
  CHECK(backend->devices() == 2);
  CHECK(backend->streams_per_device() == 2);
  CHECK(backend->runs_inline());  // it exports batchd_plugin_v1_flags with BATCHD_PLUGIN_RUNS_INLINE

  // One thread per lane, as the executor runs them.
  std::vector<std::thread> lanes;
  for (unsigned device = 0; device < 2; ++device) {
    for (unsigned stream = 0; stream < 2; ++stream) {
      lanes.emplace_back([&backend, device, stream] {
        std::mt19937_64 rng(device * 2 + stream);
        for (std::size_t size : {1, 2, 17, 64}) {
          check_reference(*backend, {device, stream}, random_inputs(rng, size), 3);
        }
      });
    }
  }
  for (std::thread& lane : lanes) lane.join();
  backend->shutdown();  // shutdown is optional in the ABI: a NULL one is skipped
}

TEST_CASE("the example plug-in reads its config") {
  auto defaults = load(example_plugin(), "");
  CHECK(defaults->devices() == 1);
  CHECK(defaults->streams_per_device() == 1);
  std::mt19937_64 rng(7);
  check_reference(*defaults, {0, 0}, random_inputs(rng, 5), 1);

  check_refused(example_plugin(), "cost=0", kRefusedConfig, "init failed: config 'cost=0'");
  check_refused(example_plugin(), "speed=9", kRefusedConfig, "unknown config key 'speed'");
}

TEST_CASE("the loader refuses what is not a usable plug-in, naming the path") {
  check_refused(test_plugin("does_not_exist"), "", kNotAPlugin, "cannot load");
  check_refused(test_plugin("bad_abi"), "", kNotAPlugin,
                "ABI version 999; this batchd supports version 1");
  check_refused(test_plugin("no_entry"), "", kNotAPlugin, "does not export batchd_plugin_v1()");
  check_refused(test_plugin("null_struct"), "", kNotAPlugin, "batchd_plugin_v1() returned NULL");
  check_refused(test_plugin("null_run"), "", kNotAPlugin, "lacks a required function");
  check_refused(test_plugin("failing"), "init=fail", kRefusedConfig,
                "init failed: init refused by its config");
  check_refused(test_plugin("failing"), "devices=0", std::errc::protocol_error,
                "init reported 0 devices");
}

TEST_CASE("a plug-in that returns too few outputs hands the caller what it appended") {
  auto backend = load(test_plugin("wrong_count"), "");
  const Inputs inputs({"a", "bb", "ccc"});
  BatchOutput out;
  const BackendStatus status = backend->run({1, 0}, inputs.view(), out);
  CHECK(status.ok);  // the daemon above compares the counts and fails the batch
  REQUIRE(out.size() == 2);
  CHECK(out.at(1) == "bb");
}

TEST_CASE("a plug-in that appends too many outputs fails its batch whatever it returns") {
  auto backend = load(test_plugin("wrong_count"), "extra=1");
  const Inputs inputs({"a", "bb"});
  BatchOutput out;
  const BackendStatus status = backend->run({0, 0}, inputs.view(), out);
  CHECK_FALSE(status.ok);
  CHECK(status.message == "plug-in wrong_count: appended more outputs than the batch has inputs");
  CHECK(out.size() == 0);
}

TEST_CASE("a plug-in's error reaches the caller as a failure with its message") {
  auto backend = load(test_plugin("failing"), "");
  CHECK_FALSE(backend->runs_inline());  // no batchd_plugin_v1_flags: runs on the lanes only
  BatchOutput out;
  const Inputs good({"x", "y"});
  REQUIRE(backend->run({0, 0}, good.view(), out).ok);
  CHECK(out.size() == 2);

  const Inputs bad({"x", "fail", "y", "z"});
  BackendStatus status = backend->run({1, 0}, bad.view(), out);
  CHECK_FALSE(status.ok);
  CHECK(status.message == "plug-in failing: refusing this batch");
  CHECK(out.size() == 0);  // the outputs it appended before failing are dropped

  const Inputs silent({"fail-silently"});
  status = backend->run({0, 0}, silent.view(), out);
  CHECK_FALSE(status.ok);
  CHECK(status.message == "plug-in failing: run failed with code 7 and no message");

  backend->shutdown();
  status = backend->run({0, 0}, good.view(), out);
  CHECK_FALSE(status.ok);
  CHECK(status.message == "plug-in failing: shutting down");
}

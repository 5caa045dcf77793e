// Many models in one daemon: [models.NAME] tables and --model flags, each model answering by name
// from the C++ client, batchd-send and batchd-stress with its own settings, the models table the
// daemon publishes, and an unknown name refused at once without costing any other request.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"
#include "client_lib/client.hpp"
#include "status/status_metrics.hpp"
#include "daemon/options.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

const ModelConfig* find(const DaemonConfig& config, const std::string& name) {
  for (const ModelConfig& model : config.models) {
    if (model.name == name) return &model;
  }
  return nullptr;
}

// The status page's entry for `name`, once the daemon has published it.
DaemonStatus::Model published(const Client& client, const std::string& name) {
  DaemonStatus::Model found;
  REQUIRE(test::eventually([&] {
    for (const DaemonStatus::Model& model : client.daemon_status().models) {
      if (model.name == name) {
        found = model;
        return true;
      }
    }
    return false;
  }, 10s));
  return found;
}

test::ProcessOutput send(const std::vector<std::string>& args) {
  std::vector<std::string> argv{test::built_binary("BATCHD_SEND_BIN")};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_captured(argv, 30s);
}

}  // namespace

TEST_CASE("[models.NAME] tables and --model flags declare models over the top-level defaults") {
  const std::string path = test::write_temp_file("models.toml",
                                      "backend = \"cpu\"\ncost = 3\nmax_batch = 32\n"
                                      "[models.langid]\nbackend = \"workers\"\nversion = \"7\"\n"
                                      "[models.fast]\ncost = 1\npolicy = \"fixed\"\nmax_wait_ms = 2\n"
                                      "[models.fast.sim]\ndevices = 2\n");
  DaemonOptions options;
  std::string message;
  REQUIRE(parse_daemon_options({"--config", path, "--model", "quick:cost=2,max_batch=8", "--model", "fast:cost=5"},
                               options, message) == -1);
  const DaemonConfig& config = options.config;
  CHECK(config.cost == 3);  // the default model keeps the top level
  REQUIRE(config.models.size() == 3);
  const ModelConfig* langid = find(config, "langid");
  REQUIRE(langid != nullptr);
  CHECK(langid->settings.backend == "workers");
  CHECK(langid->version == "7");
  CHECK(langid->settings.batch.max_batch == 32);  // inherited
  const ModelConfig* fast = find(config, "fast");
  REQUIRE(fast != nullptr);
  CHECK(fast->settings.cost == 5);  // the flag after the table
  CHECK(fast->settings.batch.policy == PolicyKind::kFixed);
  CHECK(fast->settings.batch.max_wait == 2ms);
  CHECK(fast->settings.sim.devices == 2);
  CHECK(fast->version == "1");
  const ModelConfig* quick = find(config, "quick");
  REQUIRE(quick != nullptr);
  CHECK(quick->settings.cost == 2);
  CHECK(quick->settings.batch.max_batch == 8);
  CHECK(quick->settings.backend == "cpu");

  // batchstring's own table overrides the top level for it alone.
  options = {};
  REQUIRE(parse_daemon_options({"--cost", "2", "--model", "batchstring:cost=4,version=9", "--model", "other"},
                               options, message) == -1);
  CHECK(options.config.cost == 4);
  CHECK(options.config.default_model_version == "9");
  REQUIRE(options.config.models.size() == 1);
  CHECK(options.config.models[0].settings.cost == 2);

  // A value in double quotes keeps its commas.
  options = {};
  REQUIRE(parse_daemon_options({"--model", R"(p:plugin_config="a=1,b=2",cost=3,version="7")"}, options, message) == -1);
  REQUIRE(options.config.models.size() == 1);
  CHECK(options.config.models[0].settings.plugin_config == "a=1,b=2");
  CHECK(options.config.models[0].settings.cost == 3);
  CHECK(options.config.models[0].version == "7");
}

TEST_CASE("a bad model declaration is refused with the model and the reason") {
  DaemonOptions options;
  std::string message;
  CHECK(parse_daemon_options({"--model", "no/slash"}, options, message) == 2);
  CHECK(message.find("no/slash") != std::string::npos);
  CHECK(parse_daemon_options({"--model", "-dash"}, options, message) == 2);
  CHECK(parse_daemon_options({"--model", std::string(64, 'm')}, options, message) == 2);
  CHECK(parse_daemon_options({"--model", "m:socket=/tmp/x"}, options, message) == 2);
  CHECK(message.find("daemon's, not a model's") != std::string::npos);
  CHECK(parse_daemon_options({"--model", "m:cost"}, options, message) == 2);
  CHECK(message.find("NAME:KEY=VALUE") != std::string::npos);
  CHECK(parse_daemon_options({"--model", R"(m:plugin_config="a,b)"}, options, message) == 2);
  CHECK(message.find("closing quote") != std::string::npos);
  CHECK(parse_daemon_options({"--model", R"(m:plugin_config="a"b,cost=1)"}, options, message) == 2);
  CHECK(message.find("comma after a quoted value") != std::string::npos);
  CHECK(parse_daemon_options({"--model", "m:no_such_key=1"}, options, message) == 2);
  CHECK(message.find("model m") != std::string::npos);
  CHECK(parse_daemon_options({"--model", "m:max_batch=0"}, options, message) == 2);

  const std::string path = test::write_temp_file("bad_model.toml", "[models.m]\nmax_batch = 4\nmetrics_listen = \"x\"\n");
  CHECK(parse_daemon_options({"--config", path}, options, message) == 2);
  CHECK(message.find("model m") != std::string::npos);

  std::vector<std::string> many;
  for (int m = 0; m < 64; ++m) {
    many.push_back("--model");
    many.push_back("m" + std::to_string(m));
  }
  CHECK(parse_daemon_options(many, options, message) == 2);
  CHECK(message.find("at most 64 models") != std::string::npos);
}

TEST_CASE("two models in one daemon answer by name with their own settings; an unknown name is refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1",
                                      "--model", "twice:cost=2,version=3"});
  std::unique_ptr<Client> client = test::connect(socket);

  const std::vector<DaemonStatus::Model> models = [&] {
    (void)published(*client, "twice");
    return client->daemon_status().models;
  }();
  REQUIRE(models.size() == 2);
  CHECK(models[0].name == "batchstring");
  CHECK(models[0].version == "1");
  CHECK(models[0].backend == "cpu");
  CHECK(models[1].name == "twice");
  CHECK(models[1].version == "3");
  CHECK(models[0].state == "ready");
  CHECK(models[1].state == "ready");
  CHECK(models[1].lanes == 1);
  CHECK_FALSE(models[1].shares_devices);  // a cpu model's threads are its own

  constexpr int kEach = 20;
  for (int i = 0; i < kEach; ++i) {
    const std::string input = "input " + std::to_string(i);
    Result plain = client->submit(input, 10s);
    Result named = client->submit(input, 10s, RequestOptions{Priority::kNormal, "batchstring"});
    Result twice = client->submit(input, 10s, RequestOptions{Priority::kHigh, "twice"});
    REQUIRE(plain.ok());
    REQUIRE(named.ok());
    REQUIRE(twice.ok());
    CHECK(plain.output() == reference_batchstring(input, 1));
    CHECK(named.output() == reference_batchstring(input, 1));
    CHECK(twice.output() == reference_batchstring(input, 2));
  }

  // Many at once, and asynchronously, each to its model.
  std::vector<std::string> inputs;
  for (int i = 0; i < 16; ++i) inputs.push_back("many " + std::to_string(i));
  const std::vector<std::string_view> views(inputs.begin(), inputs.end());
  const std::vector<Result> many = client->submit_many(views, 10s, RequestOptions{Priority::kLow, "twice"});
  for (std::size_t i = 0; i < many.size(); ++i) {
    REQUIRE(many[i].ok());
    CHECK(many[i].output() == reference_batchstring(inputs[i], 2));
  }
  std::vector<Client::AsyncSubmission> submissions(inputs.size());
  std::vector<std::optional<Result>> answers(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    submissions[i].input = inputs[i];
    submissions[i].model = i % 2 == 0 ? "twice" : "";
    submissions[i].done = [&answers, i](Result&& r) { answers[i] = std::move(r); };
  }
  REQUIRE(client->submit_many_async(submissions, 10s) == inputs.size());
  REQUIRE(test::eventually([&] {
    client->poll();
    return std::all_of(answers.begin(), answers.end(), [](const auto& a) { return a.has_value(); });
  }, 10s));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE(answers[i]->ok());
    CHECK(answers[i]->output() == reference_batchstring(inputs[i], i % 2 == 0 ? 2 : 1));
  }

  // An unknown name: refused at once, naming what the daemon serves; nothing else is lost.
  const Result unknown = client->submit("x", 10s, RequestOptions{Priority::kNormal, "nope"});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == ErrorCode::kUnknownModel);
  CHECK(unknown.error().message.find("'nope'") != std::string::npos);
  CHECK(unknown.error().message.find("batchstring, twice") != std::string::npos);
  const std::optional<Error> refused =
      client->submit_async("x", 10s, RequestOptions{Priority::kNormal, "nope"}, [](Result&&) { FAIL("called"); });
  REQUIRE(refused.has_value());
  CHECK(refused->code == ErrorCode::kUnknownModel);
  Result after = client->submit("after", 10s, RequestOptions{Priority::kNormal, "twice"});
  REQUIRE(after.ok());
  CHECK(after.output() == reference_batchstring("after", 2));

  // Each model counts what it took: kEach + 16 + 8 + 1 for twice.
  CHECK(test::eventually([&] { return published(*client, "twice").requests_taken == kEach + 16 + 8 + 1; }, 10s));
  CHECK(test::eventually(
      [&] { return published(*client, "batchstring").requests_taken == 2 * kEach + 8; }, 10s));

  // batchd-send --model.
  const test::ProcessOutput sent = send({"--socket", socket, "--model", "twice", "hello"});
  CHECK(sent.exit_code() == 0);
  CHECK(sent.out == reference_batchstring("hello", 2) + "\n");
  const test::ProcessOutput missing = send({"--socket", socket, "--model", "nope", "hello"});
  CHECK(missing.exit_code() == 1);
  CHECK(missing.err.find("unknown_model") != std::string::npos);
  daemon.stop();
}

TEST_CASE("each model's devices, policy and queue times are its own on the status page and in the metrics") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "100",
                                      "--max-wait-ms", "1", "--model",
                                      "second:sim_devices=1,version=7,policy=fixed,max_batch=16,max_wait_ms=3"});
  std::unique_ptr<Client> client = test::connect(socket);
  (void)published(*client, "second");
  constexpr std::uint64_t kDefault = 30, kSecond = 11;
  for (std::uint64_t i = 0; i < kDefault; ++i) REQUIRE(client->submit("d" + std::to_string(i), 10s).ok());
  for (std::uint64_t i = 0; i < kSecond; ++i) {
    REQUIRE(client->submit("s" + std::to_string(i), 10s, RequestOptions{Priority::kNormal, "second"}).ok());
  }
  // A device's batches are its model's: each model's devices ran exactly its batches.
  const auto batches_on = [](const DaemonStatus::Model& model) {
    std::uint64_t ran = 0;
    for (const DaemonStatus::Device& device : model.devices) ran += device.batches_ok;
    return ran;
  };
  const auto queued = [](const DaemonStatus::Model& model) {
    std::uint64_t counted = 0;
    for (const DaemonStatus::Histogram& histogram : model.queue_time_by_class) counted += histogram.count();
    return counted;
  };
  DaemonStatus status;
  REQUIRE(test::eventually([&] {
    status = client->daemon_status();
    return status.models.size() == 2 && status.models[1].target_batch == 16 &&
           status.models[0].requests_ok == kDefault &&
           status.models[1].requests_ok == kSecond && batches_on(status.models[0]) == status.models[0].batches &&
           batches_on(status.models[1]) == status.models[1].batches && queued(status.models[0]) == kDefault &&
           queued(status.models[1]) == kSecond;
  }, 10s));
  // Each model's queue times are its own requests', all of them normal here.
  CHECK(status.queue_times_by_model);
  CHECK(status.models[1].queue_time_by_class[static_cast<std::size_t>(Priority::kNormal)].count() == kSecond);
  CHECK(status.devices_by_model);
  REQUIRE(status.models[0].devices.size() == 2);
  REQUIRE(status.models[1].devices.size() == 1);
  CHECK(status.models[0].healthy_devices == 2);
  CHECK(status.models[1].healthy_devices == 1);
  CHECK(status.models[1].devices[0].state == "healthy");
  CHECK(status.models[1].batches > 0);
  // The page's devices are the default model's, with their compute times.
  REQUIRE(status.devices.size() == 2);
  CHECK(status.models[0].devices[0].batches_ok == status.devices[0].batches_ok);
  CHECK(status.models[0].devices[1].compute_time.count() == status.devices[1].compute_time.count());

  // Each model's policy: the second's as declared, the default model's as the page has it.
  CHECK(status.policies_by_model);
  CHECK(status.models[1].policy == "fixed");
  CHECK(status.models[1].max_batch == 16);
  CHECK(status.models[1].max_wait_ns == 3'000'000);
  CHECK(status.models[0].policy == status.policy);
  CHECK(status.models[0].max_batch == status.max_batch);
  CHECK(status.models[0].max_wait_ns == 1'000'000);

  std::string metrics;
  render_daemon_status(&status, metrics);
  const auto has = [&](const std::string& line) { return metrics.find(line) != std::string::npos; };
  CHECK(has("batchd_model_policy_info{model=\"second\",version=\"7\",policy=\"fixed\"} 1\n"));
  CHECK(has("batchd_model_max_batch{model=\"second\",version=\"7\"} 16\n"));
  CHECK(has("batchd_model_max_wait_seconds{model=\"second\",version=\"7\"} 0.003\n"));
  CHECK(has("batchd_model_target_batch{model=\"second\",version=\"7\"} 16\n"));
  CHECK(has("batchd_model_arrival_rate{model=\"batchstring\",version=\"1\"} "));
  CHECK(has("batchd_request_queue_seconds_count{model=\"second\",version=\"7\",class=\"normal\"} 11\n"));
  CHECK(has("batchd_request_queue_seconds_count{model=\"batchstring\",version=\"1\",class=\"normal\"} 30\n"));
  CHECK(has("batchd_daemon_device_state{model=\"second\",version=\"7\",device=\"0\",state=\"healthy\"} 1\n"));
  CHECK_FALSE(has("batchd_daemon_device_state{model=\"second\",version=\"7\",device=\"1\""));
  CHECK(has("batchd_daemon_device_state{model=\"batchstring\",version=\"1\",device=\"1\",state=\"healthy\"} 1\n"));
  CHECK(has("batchd_daemon_device_batches_total{model=\"second\",version=\"7\",device=\"0\",result=\"ok\"} " +
            std::to_string(status.models[1].devices[0].batches_ok) + "\n"));
  CHECK(has("batchd_model_healthy_devices{model=\"second\",version=\"7\"} 1\n"));
  CHECK(has("batchd_batch_compute_seconds_count{model=\"batchstring\",version=\"1\",device=\"0\"}"));
  CHECK_FALSE(has("batchd_batch_compute_seconds_count{model=\"second\""));
  daemon.stop();
}

TEST_CASE("sim models share the simulated devices: they take turns there, fairly") {
  // One simulated device, 20 ms a batch of one: two models each flooded by three callers. On
  // devices of their own they would run twice the batches the wall time holds.
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "sim", "--sim-devices", "1", "--sim-fixed-us", "20000",
                                      "--sim-per-item-us", "0", "--policy", "fixed", "--max-batch", "1",
                                      "--max-wait-ms", "1", "--model", "second"});
  std::unique_ptr<Client> client = test::connect(socket);
  (void)published(*client, "second");
  constexpr auto kBatch = 20ms;
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  const auto flood = [&](std::string_view model, int caller) {
    for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const std::string input = std::string(model) + "/" + std::to_string(caller) + "/" + std::to_string(i);
      Result result = client->submit(input, 30s, RequestOptions{Priority::kNormal, model});
      if (!result.ok() || result.output() != sim_expected_output(input, 1)) wrong.fetch_add(1);
    }
  };
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back(flood, "batchstring", c);
    callers.emplace_back(flood, "second", c);
  }
  std::this_thread::sleep_for(1500ms);
  stop.store(true);
  for (std::thread& caller : callers) caller.join();
  const auto elapsed = std::chrono::steady_clock::now() - started;
  CHECK(wrong.load() == 0);
  DaemonStatus status;
  REQUIRE(test::eventually([&] {
    status = client->daemon_status();
    return status.models.size() == 2 && status.models[0].requests_ok == status.models[0].batches &&
           status.models[1].requests_ok == status.models[1].batches;
  }, 10s));
  const std::uint64_t first = status.models[0].batches, second = status.models[1].batches;
  const std::uint64_t fit = static_cast<std::uint64_t>(elapsed / kBatch) + 1;
  INFO("batches: " << first << " and " << second << " in " << fit << " batch times");
  CHECK(first + second <= fit);
  // Turns by run time: neither model has twice the other's.
  CHECK(first * 2 >= second);
  CHECK(second * 2 >= first);
  // Each waited for its turns, and says so.
  for (const DaemonStatus::Model& model : status.models) {
    CHECK(model.shares_devices);
    CHECK(model.turns_waited > 0);
    CHECK(model.turn_wait_ns >= model.turns_waited);
  }
  std::string metrics;
  render_daemon_status(&status, metrics);
  CHECK(metrics.find("batchd_model_device_turns_waited_total{model=\"second\",version=\"" + status.models[1].version +
                     "\"} " + std::to_string(status.models[1].turns_waited) + "\n") != std::string::npos);
  CHECK(metrics.find("batchd_model_device_turn_wait_seconds_total{model=\"batchstring\"") != std::string::npos);
  daemon.stop();
}

TEST_CASE("batchd-stress sends a mix of models in one run, every answer checked") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1",
                                      "--model", "second", "--model", "third"});
  std::unique_ptr<Client> client = test::connect(socket);
  (void)published(*client, "third");
  const std::uint64_t requests = test::scaled(600, 60);
  const test::StressRun run = test::run_stress({"--socket", socket, "--requests", std::to_string(requests),
                                                "--threads", "3", "--model", "batchstring", "--model", "second",
                                                "--model", "third"});
  INFO("stdout: ", run.process.out, "\nstderr: ", run.process.err);
  REQUIRE(run.process.exit_code() == 0);
  CHECK(run.field("ok") == static_cast<double>(requests));
  CHECK(run.field("wrong") == 0);
  CHECK(run.field("errors") == 0);
  for (const char* name : {"batchstring", "second", "third"}) {
    CHECK_MESSAGE(test::eventually([&] { return published(*client, name).requests_taken == requests / 3; }, 10s),
                  name);
  }

  const test::StressRun unknown = test::run_stress({"--socket", socket, "--requests", "10", "--model", "nope"});
  CHECK(unknown.field("sent") == 10);
  CHECK(unknown.field("/errors_by_kind/unknown_model") == 10);
  daemon.stop();
}

TEST_CASE("a workers model takes workers that name it, and refuses those of other models") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1", "--model",
                                      "served:backend=workers,version=2"});
  std::unique_ptr<Client> client = test::connect(socket);
  CHECK(published(*client, "served").state == "unavailable");  // no worker yet
  const auto worker = [&](const std::string& model) {
    return std::vector<std::string>{test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--backend", "cpu",
                                    "--cost", "3", "--model", model, "--once", "--log-level", "warn"};
  };

  const test::ProcessOutput in_process = test::run_captured(worker("batchstring"), 30s);
  const std::string in_process_said = in_process.out + in_process.err;  // its log goes to stdout
  INFO("in process: ", in_process_said);
  CHECK(in_process.exit_code() == 1);
  CHECK(in_process_said.find("model batchstring runs the cpu backend inside the daemon") != std::string::npos);
  CHECK(in_process_said.find("workers serve model served") != std::string::npos);
  const test::ProcessOutput unknown = test::run_captured(worker("nope"), 30s);
  const std::string unknown_said = unknown.out + unknown.err;
  INFO("unknown: ", unknown_said);
  CHECK(unknown.exit_code() == 1);
  CHECK(unknown_said.find("no model named nope here") != std::string::npos);

  // A request waits for its model's first worker, within its deadline.
  std::optional<Result> early;
  REQUIRE_FALSE(client->submit_async("early", 30s, RequestOptions{Priority::kNormal, "served"},
                                     [&](Result&& r) { early = std::move(r); }));
  const pid_t pid = test::spawn(worker("served"));
  REQUIRE(test::eventually([&] {
    client->poll();
    return early.has_value();
  }, 20s));
  REQUIRE(early->ok());
  CHECK(early->output() == reference_batchstring("early", 3));
  CHECK(test::eventually([&] { return published(*client, "served").state == "ready"; }, 10s));
  const Result direct = client->submit("direct", 10s, RequestOptions{Priority::kNormal, "served"});
  REQUIRE(direct.ok());
  CHECK(direct.output() == reference_batchstring("direct", 3));
  const Result in_daemon = client->submit("direct", 10s);
  REQUIRE(in_daemon.ok());
  CHECK(in_daemon.output() == reference_batchstring("direct", 1));

  ::kill(pid, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(test::eventually([&] { return published(*client, "served").state == "unavailable"; }, 10s));
  daemon.stop();
}

TEST_CASE("models served by workers of their own: each worker serves the model it names") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1", "--model",
                                      "alpha:backend=workers", "--model", "beta:backend=workers"});
  std::unique_ptr<Client> client = test::connect(socket);
  const auto worker = [&](const std::string& model, const char* cost) {
    return std::vector<std::string>{test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--backend", "cpu",
                                    "--cost", cost, "--model", model, "--log-level", "warn"};
  };
  const test::ProcessOutput in_process = test::run_captured(worker("batchstring", "1"), 30s);
  const std::string in_process_said = in_process.out + in_process.err;
  INFO("in process: ", in_process_said);
  CHECK(in_process.exit_code() == 1);
  CHECK(in_process_said.find("workers serve models alpha, beta") != std::string::npos);

  const pid_t alpha = test::spawn(worker("alpha", "3"));
  const pid_t beta = test::spawn(worker("beta", "5"));
  REQUIRE(test::eventually([&] {
    return published(*client, "alpha").state == "ready" && published(*client, "beta").state == "ready";
  }, 20s));
  for (int i = 0; i < 50; ++i) {
    const std::string input = "request " + std::to_string(i);
    const Result a = client->submit(input, 10s, RequestOptions{Priority::kNormal, "alpha"});
    const Result b = client->submit(input, 10s, RequestOptions{Priority::kNormal, "beta"});
    const Result d = client->submit(input, 10s);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(d.ok());
    CHECK(a.output() == reference_batchstring(input, 3));
    CHECK(b.output() == reference_batchstring(input, 5));
    CHECK(d.output() == reference_batchstring(input, 1));
  }
  // Each worker is listed with its model, as the first device of that model.
  REQUIRE(test::eventually([&] {
    const DaemonStatus status = client->daemon_status();
    return status.attached_workers.size() == 2 && status.workers == 2 && status.min_workers == 2 &&
           std::all_of(status.attached_workers.begin(), status.attached_workers.end(),
                       [](const DaemonStatus::Worker& w) { return w.batches > 0; });
  }, 10s));
  const DaemonStatus status = client->daemon_status();
  std::vector<std::pair<std::string, std::uint32_t>> seen;
  for (const DaemonStatus::Worker& w : status.attached_workers) {
    seen.emplace_back(w.model, w.pid);
    CHECK(w.device == 0);
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<std::pair<std::string, std::uint32_t>>{{"alpha", static_cast<std::uint32_t>(alpha)},
                                                                   {"beta", static_cast<std::uint32_t>(beta)}});
  // The devices are the default model's, which runs in process: no worker among them.
  for (const DaemonStatus::Device& device : status.devices) CHECK(device.worker_pid == 0);

  // One model's worker leaving leaves the other's serving.
  ::kill(alpha, SIGTERM);
  int exit_status = 0;
  REQUIRE(::waitpid(alpha, &exit_status, 0) == alpha);
  CHECK(test::eventually([&] { return published(*client, "alpha").state == "unavailable"; }, 10s));
  CHECK(published(*client, "beta").state == "ready");
  const Result b = client->submit("after", 10s, RequestOptions{Priority::kNormal, "beta"});
  REQUIRE(b.ok());
  CHECK(b.output() == reference_batchstring("after", 5));
  ::kill(beta, SIGTERM);
  REQUIRE(::waitpid(beta, &exit_status, 0) == beta);
  daemon.stop();
}

TEST_CASE("a request that fails alone is a dead letter of its own model") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1", "--model",
                                      "second:backend=sim,sim_devices=1,sim_fixed_us=100,sim_poison=BAD"});
  std::unique_ptr<Client> client = test::connect(socket);
  const Result failed = client->submit("BAD input", 10s, RequestOptions{Priority::kNormal, "second"});
  CHECK_FALSE(failed.ok());
  const Result fine = client->submit("BAD input", 10s);  // the default model has no poison
  CHECK(fine.ok());
  ClientOptions options;
  options.socket_path = socket;
  std::optional<DeadLetters> letters;
  REQUIRE(test::eventually([&] {
    letters = read_dead_letters(options, nullptr);
    return letters.has_value() && !letters->entries.empty();
  }, 10s));
  REQUIRE(letters->entries.size() == 1);
  CHECK(letters->entries[0].model == "second");
  daemon.stop();
}

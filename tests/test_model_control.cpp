// Model control (daemon/daemon_models.cpp): unloading a model under load costs the other models
// nothing, answers what the unloaded one had taken, then refuses its requests with the reason;
// loading it again serves it. batchctl load/unload say what was done; an unknown model, or a
// change the other way while one is under way, gets its clear error. SIGHUP adds, removes and
// restores models the same way.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "backend/sim_reference.hpp"
#include "client_lib/client.hpp"
#include "tests/helpers.hpp"
#include "tests/worker_process.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// The default model on the cpu backend; `slow` on a sim device whose every batch takes
// `batch_time` (300 ms unless said), so what it has taken is still in flight when the unload comes.
std::string two_models_config(std::chrono::milliseconds batch_time = 300ms) {
  return test::write_temp_file("control.toml",
                               "backend = \"cpu\"\nmax_wait_ms = 1\n"
                               "[models.slow]\nbackend = \"sim\"\npolicy = \"fixed\"\nmax_wait_ms = 1\n"
                               "max_batch = 4\n[models.slow.sim]\ndevices = 1\nfixed_us = " +
                                   std::to_string(batch_time.count() * 1000) + "\n");
}

std::optional<DaemonStatus::Model> find_model(const Client& client, const std::string& name) {
  for (const DaemonStatus::Model& model : client.daemon_status().models) {
    if (model.name == name) return model;
  }
  return std::nullopt;
}

DaemonStatus::Model model_status(const Client& client, const std::string& name) {
  std::optional<DaemonStatus::Model> found = find_model(client, name);
  if (!found) FAIL("no model " << name << " on the status page");
  return *found;
}

// Eventually: the page is published every few tens of milliseconds, and a reload adds models.
bool state_is(const Client& client, const std::string& name, const std::string& state) {
  return test::eventually([&] {
    const std::optional<DaemonStatus::Model> found = find_model(client, name);
    return found && found->state == state;
  }, test::grace(10s));
}

std::optional<std::string> control(const std::string& socket, const std::string& model, ModelAction action,
                                   Error& error) {
  ClientOptions options;
  options.socket_path = socket;
  return control_model(options, model, action, test::grace(30s), &error);
}

// The other models' load: every request answered, and right.
void check_clean(const test::StressRun& run) {
  INFO(run.process.err);
  CHECK(run.process.exit_code() == 0);
  CHECK(run.field("ok") > 0);
  CHECK(run.field("errors") == 0);
  CHECK(run.field("wrong") == 0);
}

using test::batchctl;

}  // namespace

TEST_CASE("unloading a model under load answers what it took, refuses the rest, and costs the other model nothing; "
          "loading it again serves it") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--config", two_models_config()});
  std::unique_ptr<Client> client = test::connect(socket);
  REQUIRE(state_is(*client, "slow", "ready"));

  // The other model's load, closed loop, through the whole unload and load.
  const double seconds = 4 * test::scale() + 2;
  auto other = std::async(std::launch::async, [&] {
    return test::run_stress({"--socket", socket, "--threads", "4", "--duration", std::to_string(seconds),
                             "--timeout-ms", std::to_string(test::grace(5000ms).count())});
  });

  // Taken by the slow model and in flight (a batch of 4 runs 300 ms; the rest wait for it).
  constexpr std::size_t kInFlight = 10;
  std::vector<std::string> inputs;
  std::vector<std::optional<Result>> answers(kInFlight);
  for (std::size_t i = 0; i < kInFlight; ++i) inputs.push_back("in flight " + std::to_string(i));
  std::vector<Client::AsyncSubmission> submissions(kInFlight);
  for (std::size_t i = 0; i < kInFlight; ++i) {
    submissions[i].input = inputs[i];
    submissions[i].model = "slow";
    submissions[i].done = [&answers, i](Result&& r) { answers[i] = std::move(r); };
  }
  const std::uint64_t taken_before = model_status(*client, "slow").requests_taken;
  REQUIRE(client->submit_many_async(submissions, test::grace(30s)) == kInFlight);
  REQUIRE(test::eventually([&] { return model_status(*client, "slow").requests_taken == taken_before + kInFlight; },
                           test::grace(10s)));

  const auto answered = [&] {
    return static_cast<std::size_t>(
        std::count_if(answers.begin(), answers.end(), [](const auto& a) { return a.has_value(); }));
  };
  client->poll();
  const std::size_t answered_before = answered();  // a loaded machine may have run them all by now
  Error error;
  const auto unloaded_from = std::chrono::steady_clock::now();
  const std::optional<std::string> unloaded = control(socket, "slow", ModelAction::kUnload, error);
  const double unload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - unloaded_from).count();
  REQUIRE_MESSAGE(unloaded.has_value(), error.message);
  MESSAGE("unload: ", *unloaded, " (", unload_s, " s for the caller; ", answered_before, " of ", kInFlight,
          " answered before it)");
  CHECK(unloaded->find("model slow is unloaded") != std::string::npos);
  // The unload's answer comes once what the model held is answered (its completions written):
  // one look now finds every answer.
  client->poll();
  CHECK(answered() == kInFlight);
  // Its answer came once what it held was answered: every request it had taken, right.
  REQUIRE(test::eventually([&] {
    client->poll();
    return std::all_of(answers.begin(), answers.end(), [](const auto& a) { return a.has_value(); });
  }, test::grace(10s)));
  for (std::size_t i = 0; i < kInFlight; ++i) {
    INFO(i, ": ", answers[i]->ok() ? answers[i]->output() : answers[i]->error().message);
    REQUIRE(answers[i]->ok());
    CHECK(answers[i]->output() == sim_expected_output(inputs[i], 1));
  }

  // Unloaded: the status page says so, and a request is refused at once with the reason.
  CHECK(state_is(*client, "slow", "unloaded"));  // as soon as the page is next published
  CHECK(model_status(*client, "slow").lanes == 0);
  const Result refused = client->submit("late", test::grace(10s), RequestOptions{Priority::kNormal, "slow"});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kBackendUnavailable);
  CHECK(refused.error().message.find("model slow is unloaded") != std::string::npos);
  // Unloading it again has nothing to do.
  const std::optional<std::string> again = control(socket, "slow", ModelAction::kUnload, error);
  REQUIRE(again.has_value());
  CHECK(*again == "model slow is unloaded");

  // batchctl load: ready and answering again.
  const test::ProcessOutput loaded = batchctl({"--socket", socket, "load", "slow"});
  INFO(loaded.err);
  CHECK(loaded.exit_code() == 0);
  CHECK(loaded.out.find("model slow is loaded") != std::string::npos);
  CHECK(state_is(*client, "slow", "ready"));
  const Result back = client->submit("back", test::grace(10s), RequestOptions{Priority::kNormal, "slow"});
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  CHECK(back.output() == sim_expected_output("back", 1));

  // The other model, all along: nothing lost, nothing wrong.
  check_clean(other.get());
  daemon.stop();
}

TEST_CASE("model control refuses what it cannot do, with the reason") {
  const std::string socket = test::temp_socket_path();
  // The load below must come while the unload waits for the batch it took: batchctl's start
  // alone takes hundreds of milliseconds on a sanitizer build, so the batch is longer here and
  // stretched with the build.
  test::DaemonProcess daemon(socket, {"--config", two_models_config(test::grace(1500ms))});
  std::unique_ptr<Client> client = test::connect(socket);
  Error error;
  CHECK_FALSE(control(socket, "nope", ModelAction::kUnload, error).has_value());
  CHECK(error.code == ErrorCode::kUnknownModel);
  CHECK(error.message.find("no model named nope") != std::string::npos);
  CHECK_FALSE(control(socket, std::string(64, 'x'), ModelAction::kLoad, error).has_value());
  CHECK(error.code == ErrorCode::kUnknownModel);

  // Loading a loaded model has nothing to do.
  const std::optional<std::string> loaded = control(socket, "batchstring", ModelAction::kLoad, error);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == "model batchstring is loaded");

  // A load while the unload still answers what it holds: refused, saying so.
  std::vector<std::optional<Result>> answers(4);
  std::vector<Client::AsyncSubmission> submissions(4);
  for (std::size_t i = 0; i < submissions.size(); ++i) {
    submissions[i].input = "held";
    submissions[i].model = "slow";
    submissions[i].done = [&answers, i](Result&& r) { answers[i] = std::move(r); };
  }
  REQUIRE(client->submit_many_async(submissions, test::grace(30s)) == submissions.size());
  REQUIRE(test::eventually([&] { return model_status(*client, "slow").requests_taken >= 4; }, test::grace(10s)));
  auto unloading = std::async(std::launch::async, [&] {
    Error unload_error;
    return control(socket, "slow", ModelAction::kUnload, unload_error);
  });
  REQUIRE(state_is(*client, "slow", "unloading"));
  const test::ProcessOutput busy = batchctl({"--socket", socket, "load", "slow"});
  CHECK(busy.exit_code() == 1);
  CHECK(busy.err.find("model slow is unloading") != std::string::npos);
  REQUIRE(unloading.get().has_value());
  CHECK(state_is(*client, "slow", "unloaded"));

  // The default model too: the status page keeps being published without its devices.
  const test::ProcessOutput json = batchctl({"--socket", socket, "--json", "unload", "batchstring"});
  CHECK(json.exit_code() == 0);
  CHECK(json.out.find(R"({"model":"batchstring","action":"unload","message":"model batchstring is unloaded)") == 0);
  std::this_thread::sleep_for(300ms);
  CHECK(client->daemon_status().age_ns < 250'000'000 * static_cast<std::int64_t>(test::slowdown()));
  const Result refused = client->submit("x", test::grace(10s));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kBackendUnavailable);
  REQUIRE(control(socket, "batchstring", ModelAction::kLoad, error).has_value());
  const Result served = client->submit("x", test::grace(10s));
  REQUIRE(served.ok());
  CHECK(served.output() == reference_batchstring("x", 1));
  daemon.stop();
}

TEST_CASE("unloading a workers model lets its workers go; they attach again once it is loaded") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--cpu-threads", "1", "--max-wait-ms", "1", "--model",
                                      "served:backend=workers"});
  std::unique_ptr<Client> client = test::connect(socket);
  // Without --once: it tries again (once a second) while refused, as while a daemon restarts.
  test::WorkerProcess worker({test::built_binary("BATCHD_WORKER_BIN"), "--socket", socket, "--backend", "cpu",
                              "--cost", "3", "--model", "served", "--log-level", "warn"});
  REQUIRE(state_is(*client, "served", "ready"));
  const Result before = client->submit("w", test::grace(10s), RequestOptions{Priority::kNormal, "served"});
  REQUIRE(before.ok());
  CHECK(before.output() == reference_batchstring("w", 3));

  Error error;
  REQUIRE_MESSAGE(control(socket, "served", ModelAction::kUnload, error).has_value(), error.message);
  CHECK(state_is(*client, "served", "unloaded"));
  CHECK(test::eventually([&] { return client->daemon_status().attached_workers.empty(); }, test::grace(5s)));
  // Refused while unloaded, and it keeps trying: nothing attaches meanwhile.
  std::this_thread::sleep_for(1500ms);
  CHECK(client->daemon_status().attached_workers.empty());
  const Result refused = client->submit("w", test::grace(10s), RequestOptions{Priority::kNormal, "served"});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::kBackendUnavailable);

  REQUIRE_MESSAGE(control(socket, "served", ModelAction::kLoad, error).has_value(), error.message);
  CHECK(state_is(*client, "served", "ready"));  // its worker is back within its retry
  const Result after = client->submit("w", test::grace(10s), RequestOptions{Priority::kNormal, "served"});
  REQUIRE_MESSAGE(after.ok(), after.error().message);
  CHECK(after.output() == reference_batchstring("w", 3));
  daemon.stop();
}

TEST_CASE("SIGHUP adds, removes and restores models under load; the other models lose nothing") {
  // keep answers as the default model does: batchd-stress checks every answer with one cost.
  const std::string base = "backend = \"cpu\"\nmax_wait_ms = 1\n[models.keep]\nversion = \"2\"\n";
  const std::string slow = "[models.slow]\nbackend = \"sim\"\npolicy = \"fixed\"\nmax_wait_ms = 1\nmax_batch = 4\n"
                           "[models.slow.sim]\ndevices = 1\nfixed_us = 300000\n";
  const std::string added = "[models.added]\nbackend = \"sim\"\nversion = \"5\"\n";
  const std::string path = test::write_temp_file("reload.toml", base + slow);
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--config", path});
  std::unique_ptr<Client> client = test::connect(socket);
  REQUIRE(state_is(*client, "slow", "ready"));
  const std::uint32_t slow_id = [&] {
    const auto models = client->daemon_status().models;
    return static_cast<std::uint32_t>(std::find_if(models.begin(), models.end(),
                                                   [](const auto& m) { return m.name == "slow"; }) - models.begin());
  }();

  const double seconds = 4 * test::scale() + 3;
  auto others = std::async(std::launch::async, [&] {
    return test::run_stress({"--socket", socket, "--threads", "4", "--model", "batchstring", "--model", "keep",
                             "--duration", std::to_string(seconds), "--timeout-ms",
                             std::to_string(test::grace(5000ms).count())});
  });

  // What slow has taken when the reload drops it is answered.
  std::vector<std::optional<Result>> answers(6);
  std::vector<std::string> held;
  for (std::size_t i = 0; i < answers.size(); ++i) held.push_back("held " + std::to_string(i));
  std::vector<Client::AsyncSubmission> submissions(answers.size());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    submissions[i].input = held[i];
    submissions[i].model = "slow";
    submissions[i].done = [&answers, i](Result&& r) { answers[i] = std::move(r); };
  }
  const std::uint64_t taken_before = model_status(*client, "slow").requests_taken;
  REQUIRE(client->submit_many_async(submissions, test::grace(30s)) == answers.size());
  REQUIRE(test::eventually([&] { return model_status(*client, "slow").requests_taken == taken_before + 6; },
                           test::grace(10s)));
  std::ofstream(path) << base + added;
  daemon.signal(SIGHUP);
  REQUIRE(state_is(*client, "added", "ready"));
  REQUIRE(state_is(*client, "slow", "absent"));
  REQUIRE(test::eventually([&] {
    client->poll();
    return std::all_of(answers.begin(), answers.end(), [](const auto& a) { return a.has_value(); });
  }, test::grace(10s)));
  for (std::size_t i = 0; i < answers.size(); ++i) {
    REQUIRE(answers[i]->ok());
    CHECK(answers[i]->output() == sim_expected_output(held[i], 1));
  }
  CHECK(model_status(*client, "added").version == "5");
  const Result fresh = client->submit("new", test::grace(10s), RequestOptions{Priority::kNormal, "added"});
  REQUIRE_MESSAGE(fresh.ok(), fresh.error().message);
  CHECK(fresh.output() == sim_expected_output("new", 1));
  // Removed: its name is unknown, to a client that had its id and to one that looks it up.
  const Result gone = client->submit("x", test::grace(10s), RequestOptions{Priority::kNormal, "slow"});
  REQUIRE_FALSE(gone.ok());
  CHECK(gone.error().code == ErrorCode::kUnknownModel);
  const test::ProcessOutput looked_up = batchctl({"--socket", socket, "load", "slow"});
  CHECK(looked_up.exit_code() == 1);
  CHECK(looked_up.err.find("no model named slow") != std::string::npos);

  // Declared again: back at its id.
  std::ofstream(path) << base + added + slow;
  daemon.signal(SIGHUP);
  REQUIRE(state_is(*client, "slow", "ready"));
  CHECK(client->daemon_status().models.at(slow_id).name == "slow");
  const Result back = client->submit("back", test::grace(10s), RequestOptions{Priority::kNormal, "slow"});
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  CHECK(back.output() == sim_expected_output("back", 1));

  // A model whose backend cannot be made stays unloaded, and a load says why.
  std::ofstream(path) << base + added + slow + "[models.broken]\nbackend = \"plugin:/nonexistent/model.so\"\n";
  daemon.signal(SIGHUP);
  REQUIRE(state_is(*client, "broken", "unloaded"));
  const test::ProcessOutput broken = batchctl({"--socket", socket, "load", "broken"});
  CHECK(broken.exit_code() == 1);
  CHECK(broken.err.find("model broken did not load") != std::string::npos);
  CHECK(broken.err.find("/nonexistent/model.so") != std::string::npos);

  check_clean(others.get());
  daemon.stop();
}

TEST_CASE("a model a reload drops while it loads goes once loaded; declared again meanwhile, it stays") {
  // lazy's backend takes 3 s to make. Each config sets its own max_wait_ms for the default model:
  // the status page shows when the daemon has applied it.
  const auto config = [](int wait_ms, bool lazy) {
    return "backend = \"cpu\"\nmax_wait_ms = " + std::to_string(wait_ms) + "\n" +
           (lazy ? "[models.lazy]\nbackend = \"sim\"\n[models.lazy.sim]\nload_ms = 3000\n" : "");
  };
  const std::string path = test::write_temp_file("reload_loading.toml", config(1, false));
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--config", path});
  std::unique_ptr<Client> client = test::connect(socket);
  const auto reload = [&](int wait_ms, bool lazy) {
    std::ofstream(path) << config(wait_ms, lazy);
    daemon.signal(SIGHUP);
    REQUIRE(test::eventually([&] { return client->daemon_status().max_wait_ns == wait_ms * 1'000'000LL; },
                             test::grace(10s)));
  };

  // Added, then dropped while it loads: removed once its load ends, with no other reload.
  reload(2, true);
  REQUIRE(state_is(*client, "lazy", "loading"));
  reload(3, false);
  CHECK(model_status(*client, "lazy").state == "loading");
  REQUIRE(state_is(*client, "lazy", "absent"));

  // Back (loading again), dropped, and declared again while it still loads: it stays, and serves.
  reload(4, true);
  REQUIRE(state_is(*client, "lazy", "loading"));
  reload(5, false);
  reload(6, true);
  REQUIRE(state_is(*client, "lazy", "ready"));
  const Result answer = client->submit("lazy", test::grace(10s), RequestOptions{Priority::kNormal, "lazy"});
  REQUIRE_MESSAGE(answer.ok(), answer.error().message);
  CHECK(answer.output() == sim_expected_output("lazy", 1));
  std::this_thread::sleep_for(300ms);
  CHECK(model_status(*client, "lazy").state == "ready");
  daemon.stop();
}

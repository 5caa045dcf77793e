// The daemon's life: start-up (io_uring, status page, control socket, router), the drain loop
// that ties the other parts together, and the watchdog. The drain loop's own parts:
// daemon_batching.cpp (drain and batch), daemon_io.cpp (routing the event ring's completions, and
// sleeping), daemon_peers.cpp (attached clients' and workers' connections and ends),
// daemon_shutdown.cpp (stopping), daemon_reload.cpp (SIGHUP). The types it ties together:
// AttachHandshake (the control socket's handshake), ModelRegistry and ModelPipeline (each model's
// admission, batching and lanes), ModelChanges (load, unload, reload), StatusWriter (the status
// page), EventRing (the io_uring), and check_can_start (start_checks.hpp).
#include "daemon/daemon.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "status/status_metrics.hpp"
#include "status/status_read.hpp"
#include "daemon/start_checks.hpp"
#include "daemon/io_ops.hpp"
#include "shm/futex.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

namespace {

constexpr unsigned kRingEntries = 512;

std::vector<std::unique_ptr<Backend>> one(std::unique_ptr<Backend> backend) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  return backends;
}

}  // namespace

Daemon::Daemon(DaemonConfig config, std::unique_ptr<Backend> backend) : Daemon(std::move(config), one(std::move(backend))) {}

Daemon::Daemon(DaemonConfig config, std::vector<std::unique_ptr<Backend>> backends) : config_(std::move(config)) {
  if (config_.socket_path.empty()) config_.socket_path = default_socket_path();
  if (backends.size() != config_.models.size() + 1) {
    throw std::invalid_argument("the daemon needs one backend per model (" + std::to_string(config_.models.size() + 1) +
                                "), got " + std::to_string(backends.size()));
  }
  if (backends.size() > kMaxModels) {
    throw std::invalid_argument("at most " + std::to_string(kMaxModels) + " models in one daemon");
  }
  ModelConfig batchstring{kDefaultModelName, config_.default_model_version, config_};
  for (std::size_t m = 0; m < backends.size(); ++m) {
    ModelConfig model = m == 0 ? batchstring : config_.models[m - 1];
    if (models_.named(model.name) != nullptr) throw std::invalid_argument("two models are named " + model.name);
    models_.add(std::make_unique<ModelPipeline>(static_cast<std::uint32_t>(m), std::move(model),
                                                std::move(backends[m]), stats_, completer_));
  }
}

bool Daemon::all_devices_lost() const noexcept {
  // One model's devices lost for good is the process's state (CUDA's sticky errors): only a new
  // process serves them again, so the daemon exits for its service manager to restart it.
  return std::any_of(models_.begin(), models_.end(),
                     [](const auto& m) { return m->running() && m->router().all_devices_lost(); });
}

Daemon::~Daemon() {
  status_.stop();
  changes_.abandon();
  for (auto& model : models_) model->stop();
  if (dead_letters_) dead_letters_->stop();  // writes what the lanes recorded last
  events_.close();
  // The ring's polls are gone with it: the connections still parked for them (and those of
  // handshakes never finished) close on the reaper, whatever a peer queued on them.
  parked_.release_all();
  if (handshake_) handshake_->release_all();
}

void Daemon::start() {
  check_can_start(config_, models_, AttachHandshake::kMaxAttaching);
  events_.open(kRingEntries);
  // Before the socket: a dead-letter file that cannot be opened stops the start with its reason.
  dead_letters_ = std::make_unique<DeadLetterLog>(config_.dead_letters);
  dead_letters_->start();
  status_.create(*dead_letters_, caches_);
  control_ = std::make_unique<ControlSocket>(config_.socket_path, config_.refuse_passed_fds);
  parked_.set_close_at_once(control_->refuses_fds());
  if (control_->refuses_fds()) {
    spdlog::info("control socket: the kernel refuses descriptors sent by peers (SO_PASSRIGHTS)");
  } else {
    spdlog::info("control socket: descriptors a peer sends are taken and closed on the reaper's "
                 "threads (this kernel cannot refuse them; SO_PASSRIGHTS needs Linux 6.16)");
  }
  handshake_ = std::make_unique<AttachHandshake>(AttachHandshake::Parts{
      config_, *control_, events_, reaper_, parked_, log_limit_, stats_, sessions_, workers_, models_, changes_,
      caches_, status_, *dead_letters_, stop_requested_});
  start_tracing();
  for (auto& model : models_) model->prepare(hooks_for(*model));
  status_.publish_model_names();
  for (const auto& model : models_) status_.publish_policy(*model);
  status_.publish();
  start_metrics_listener();
  for (auto& model : models_) model->start_lanes();
  // As often as the quickest router's watchdog looks at its devices: the page is as fresh as
  // what it shows.
  std::chrono::milliseconds publish_period{50};
  for (const auto& model : models_) {
    publish_period = std::min(publish_period, std::clamp(model->config().settings.routing.device_timeout / 4,
                                                         std::chrono::milliseconds(1), std::chrono::milliseconds(50)));
  }
  status_.start_publishing(publish_period);
  events_.arm_poll(control_->fd(), pack(Op::kListen, 0));
  const auto describe = [](const ModelPipeline& model) {
    const BatchLimits& batch = model.limits();
    return fmt::format("backend {}: {} devices x {} streams; policy {}, max batch {}, max wait {} us, max batch "
                       "bytes {}",
                       model.backend_name(), model.backend().devices(), model.backend().streams_per_device(),
                       policy_name(batch.policy), batch.max_batch,
                       std::chrono::duration_cast<std::chrono::microseconds>(batch.max_wait).count(),
                       batch.max_batch_bytes);
  };
  spdlog::info("batchd listening on {} ({}; dead letters {})", config_.socket_path, describe(models_.front()),
               config_.dead_letters.path.empty() ? std::string("in memory only") : "to " + config_.dead_letters.path);
  for (std::size_t m = 1; m < models_.size(); ++m) {
    spdlog::info("model {} (id {}, version {}): {}", models_[m]->config().name, m, models_[m]->config().version,
                 describe(*models_[m]));
  }
}

ModelPipeline::Hooks Daemon::hooks_for(ModelPipeline& model) {
  ModelPipeline* self = &model;
  ModelPipeline::Hooks hooks;
  hooks.on_batch_freed = [this] {
    // After the batch's seq_cst return to the pool (Router::release).
    if (status_.page().drain_sleeping.load(std::memory_order_seq_cst) != 0) events_.ring();
  };
  hooks.on_tick = [this, self] {
    // The default model's devices are the page's: its watchdog publishes at once what it saw (a
    // failed batch's callers are answered after this), unless a load or unload holds the models
    // (the publisher thread then catches up).
    if (self->id() == 0) {
      std::unique_lock lock(models_.mu(), std::try_to_lock);
      if (lock.owns_lock()) status_.publish_locked();
    }
    if (self->router().all_devices_lost()) events_.ring();  // the drain loop exits (run())
  };
  hooks.dead_letters = dead_letters_.get();
  hooks.device_groups = &device_groups_;
  hooks.tracer = tracer_.get();
  return hooks;
}

void Daemon::start_tracing() {
  const tracing::TraceOptions& options = config_.tracing;
  if (!options.enabled) return;
  std::string why;
  std::unique_ptr<tracing::SpanSink> sink = tracing::open_span_sink(options, "batchd", why);
  if (!sink) throw std::runtime_error("cannot trace: " + why);
  tracer_ = std::make_unique<RequestTracer>(options, std::move(sink));
  completer_.set_tracer(tracer_.get());
  spdlog::info("tracing: spans to {} over OTLP {}; {} of the requests without a sampled context{}",
               options.endpoint, options.protocol,
               options.rate == 0 ? std::string("none") : fmt::format("1 in {}", options.rate),
               options.count < 0 ? std::string() : fmt::format(", {} at most", options.count));
}


void Daemon::start_metrics_listener() {
  if (config_.metrics_listen.empty()) return;
  const ListenAddress address = parse_listen_address(config_.metrics_listen, "--metrics-listen").value();
  // The same reading and the same writer as a client's (batchd-http's /metrics): the two agree.
  metrics_ = std::make_unique<MetricsListener>(address, [this] {
    const DaemonStatus status = read_daemon_status(status_.page(), shm::kStatusFileBytes);
    std::string out;
    render_daemon_status(&status, out);
    return out;
  });
  metrics_->start();
  const std::size_t colon = config_.metrics_listen.rfind(':');
  spdlog::info("serving GET /metrics on {}:{}", config_.metrics_listen.substr(0, colon), metrics_->port());
}


void Daemon::update_limits(const BatchLimits& limits) { update_limits(kDefaultModelName, limits); }

bool Daemon::update_limits(const std::string& model, const BatchLimits& limits) {
  std::unique_lock lock(models_.mu());  // a reload on the drain thread may be adding a model
  ModelPipeline* named = models_.named(model);
  lock.unlock();
  if (named == nullptr) return false;
  named->update_limits(limits);
  limits_changed_.store(true, std::memory_order_release);
  events_.ring();
  return true;
}

void Daemon::apply_pending_limits() {
  if (!limits_changed_.exchange(false, std::memory_order_acq_rel)) return;
  for (auto& model : models_) {
    if (model->apply_pending_limits()) status_.publish_policy(*model);
  }
}

void Daemon::set_watchdog(std::chrono::nanoseconds interval, std::function<void()> ping) {
  watchdog_interval_ns_ = std::max<std::int64_t>(interval.count(), 1'000'000);
  watchdog_ping_ = std::move(ping);
}

void Daemon::ping_watchdog_if_due(std::int64_t now_ns) {
  if (watchdog_interval_ns_ == 0 || now_ns < next_watchdog_ns_) return;
  watchdog_ping_();
  next_watchdog_ns_ = now_ns + watchdog_interval_ns_;
}

void Daemon::run() {
  std::int64_t idle_since_ns = 0;
  bool spinning = false;
  const std::int64_t spin_ns = static_cast<std::int64_t>(config_.drain_spin_us) * 1000;
  for (;;) {
    handshake_->begin_pass();
    events_.handle_completions([this](std::uint64_t data, int result) { handle_event(data, result); });
    apply_reload();
    apply_pending_limits();
    const std::int64_t now_ns = shm::monotonic_ns();
    changes_.advance();
    ping_watchdog_if_due(now_ns);
    handshake_->expire(now_ns);
    const bool drained = drain_rings(now_ns);
    const bool progressed = fill_batches(now_ns) || drained;
    for (auto& model : models_) model->refresh_policy_stats(now_ns);
    if (now_ns >= next_cache_tally_ns_) {
      next_cache_tally_ns_ = now_ns + kCacheTallyPeriodNs;
      sessions_.for_each([this](ClientSession& session) { session.credit_cache_hits(stats_.by_model); });
    }

    if (stop_requested_.load(std::memory_order_relaxed) && stopping_done(now_ns, progressed)) break;
    if (all_devices_lost()) {
      finish_lost();
      return;
    }
    if (progressed) {
      if (spinning) drain_spin_.note(true);
      spinning = false;
      idle_since_ns = 0;
      continue;
    }
    if (idle_since_ns == 0) {
      idle_since_ns = now_ns;
      spinning = spin_ns > 0 && drain_spin_.pays();
    }
    if (spinning && now_ns - idle_since_ns < spin_ns) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    if (spinning) drain_spin_.note(false);
    spinning = false;
    sleep_until_work();
    idle_since_ns = 0;
  }
  finish_stop();
}

}  // namespace batchd

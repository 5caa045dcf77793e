// Worker processes on the control socket (--backend workers, docs/WORKERS.md): the worker role of
// the handshake (its own grant: a worker sees every client's inputs), the region the daemon makes
// for each, the one notice a worker may send afterwards (it is stopping), and a worker's end. A
// worker is a device to the router: it opens a place when it attaches and closes it when it goes,
// whichever way it goes (a hang-up, a crash, a protocol violation, a hang, a graceful stop).
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "daemon/daemon.hpp"
#include "daemon/io_ops.hpp"
#include "text/ascii.hpp"

namespace batchd {

using io_ops::Op;
using io_ops::pack;

namespace {

std::string field_text(const char (&field)[shm::kWorkerNameBytes]) {
  std::string text = text::printable(std::string_view(field, sizeof(field)));
  return text.empty() ? std::string("unnamed") : text;
}

// Output room per buffer: a full batch of the largest outputs, within a bound that keeps a worker
// of huge batches from reserving gigabytes of address space per buffer (a batch whose outputs
// pass it is split by the router until they fit).
constexpr std::uint64_t kMaxOutputAreaBytes = std::uint64_t{64} << 20;

}  // namespace

ModelPipeline* Daemon::model_for_worker(PendingAttach& pending, const std::string& name) {
  const std::vector<ModelPipeline*>& workers_models = models_.served_by_workers();
  const auto served_by_workers = [&] {
    if (workers_models.empty()) return std::string("no model here is served by workers (backend = \"workers\")");
    std::string text = workers_models.size() == 1 ? "workers serve model " : "workers serve models ";
    for (std::size_t m = 0; m < workers_models.size(); ++m) {
      text += (m == 0 ? "" : ", ") + workers_models[m]->config().name;
    }
    return text;
  };
  ModelPipeline* named = models_.named(name);
  if (named != nullptr && !named->by_workers()) {
    refuse(pending, shm::AttachStatus::kBadHello,
           "model " + name + " runs the " + named->backend_name() +
               " backend inside the daemon, not in worker processes; " + served_by_workers());
    return nullptr;
  }
  if (named != nullptr) return named;
  // A worker of another name goes to the default model when workers serve it: the daemon of one
  // model takes workers of any name, as before models had names.
  if (models_.front().by_workers()) return &models_.front();
  if (workers_models.empty()) {
    refuse(pending, shm::AttachStatus::kBadHello,
           "this daemon runs the " + models_.front().backend_name() +
               " backend; workers attach to one started with --backend workers");
  } else {
    refuse(pending, shm::AttachStatus::kBadHello,
           "no model named " + name + " here; " + served_by_workers() +
               " (batchd-worker --model NAME, batchd.Worker(model=NAME))");
  }
  return nullptr;
}

void Daemon::attach_worker(PendingAttach& pending, const shm::WorkerHello& hello, std::uint64_t id) {
  const PeerCredentials& peer = pending.peer;
  ModelPipeline* const model = model_for_worker(pending, field_text(hello.name));
  if (model == nullptr) return;
  if (model->lifecycle() != ModelPipeline::Lifecycle::kLoaded) {
    // As while the daemon restarts: a worker tries again, and attaches once the model is loaded.
    refuse(pending, shm::AttachStatus::kShuttingDown,
           "model " + model->config().name + " is not loaded (batchctl load " + model->config().name + ")");
    return;
  }
  const ModelSettings& settings = model->config().settings;
  WorkerBackend& workers = *model->workers();
  Router& router = model->router();
  if (!peer_allowed(peer, settings.workers.allowed_uids, settings.workers.allowed_gids)) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "uid " + std::to_string(peer.uid) + " may not attach as a worker (--worker-allow-uid)");
    return;
  }
  if (hello.concurrency == 0 || hello.concurrency > shm::kMaxWorkerBuffers || hello.max_inputs == 0 ||
      hello.max_bytes == 0) {
    refuse(pending, shm::AttachStatus::kBadHello, "worker hello with a concurrency or batch limit out of range");
    return;
  }
  const std::optional<unsigned> slot = workers.free_slot();
  if (!slot) {
    refuse(pending, shm::AttachStatus::kTooManyClients,
           "model " + model->config().name + " already has its maximum of " +
               std::to_string(settings.workers.max_workers) + " workers");
    return;
  }
  // The worker's own limits, within what this daemon ever sends.
  WorkerLinkOptions options;
  options.spin = settings.workers.spin;
  options.arena = &model->input_arena();
  options.copied = &stats_.worker_pieces_copied;
  const unsigned place = workers_.free_place();
  if (place < shm::kStatusDevices) options.handoff = &stats_.latency.handoff_by_device[place];
  options.region.buffers = std::min(hello.concurrency, settings.workers.lanes_per_worker);
  options.region.max_inputs = std::min<std::uint32_t>(hello.max_inputs, model->limits().max_batch);
  options.region.max_input_bytes = std::max<std::uint64_t>(
      std::min(hello.max_bytes, model->limits().max_batch_bytes), config_.segment.max_input_bytes);
  options.region.max_output_bytes = config_.segment.max_output_bytes;
  options.region.output_capacity = std::max<std::uint64_t>(
      std::min(std::uint64_t{options.region.max_inputs} * config_.segment.max_output_bytes, kMaxOutputAreaBytes),
      config_.segment.max_output_bytes);
  WorkerIdentity who{id, *slot, peer.pid, peer.uid, field_text(hello.name), field_text(hello.version), place};
  auto created = WorkerLink::create(std::move(who), options);
  if (!created) {
    spdlog::error("cannot create a region for worker pid {}: {}", peer.pid, created.error().message);
    refuse(pending, shm::AttachStatus::kInternalError, created.error().message);
    return;
  }
  std::shared_ptr<WorkerLink> link = std::move(*created);
  const int fd = pending.connection.get();
  int out_fds[shm::kWorkerAttachFds] = {};
  out_fds[shm::kWorkerRegionFd] = link->region_fd();
  out_fds[shm::kInputArenaFd] = model->input_arena().fd();
  if (!send_attached(pending, id, out_fds, "its worker region")) return;
  link->set_connection(std::move(pending.connection));
  events_.arm_poll(fd, pack(Op::kWorker, id));
  workers.install(*slot, link);
  router.open_device(*slot, link->buffers());
  workers_.add(id, AttachedWorker{model, *slot, link});
  spdlog::info("{} attached to model {} as device {} (uid {}, {} lanes, batches up to {} inputs / {} bytes)",
               link->label(), model->config().name, *slot, peer.uid, link->buffers(), options.region.max_inputs,
               options.region.max_input_bytes);
}

void Daemon::on_worker_readable(std::uint64_t id) {
  AttachedWorker* worker = workers_.find(id);
  if (worker == nullptr) return;
  const std::shared_ptr<WorkerLink>& link = worker->link;
  const int fd = link->connection_fd();
  shm::WorkerNotice notice{};
  std::vector<shm::UniqueFd> fds;
  const Expected<std::size_t> n =
      shm::recv_with_fds(fd, std::as_writable_bytes(std::span(&notice, 1)), fds, MSG_DONTWAIT);
  const bool carried_fds = !fds.empty();
  for (shm::UniqueFd& passed : fds) reaper_.drop(std::move(passed));
  if (!n && n.error().code == std::errc::resource_unavailable_try_again) {
    events_.arm_poll(fd, pack(Op::kWorker, id));
    return;
  }
  if (!n || *n == 0) {
    drop_worker(id, nullptr, false);
    return;
  }
  if (carried_fds || *n != sizeof(notice) || notice.magic != shm::kWorkerNoticeMagic ||
      notice.kind != shm::WorkerNoticeKind::kStopping) {
    drop_worker(id, "sent something other than a stopping notice on its control connection", false);
    return;
  }
  // Its running batches finish; new ones go elsewhere from now on. The link hangs up once none
  // runs, and this poll then sees the connection end.
  spdlog::info("{} is stopping: it takes no new batches", link->label());
  worker->model->router().close_device(worker->slot);
  link->begin_stopping();
  events_.arm_poll(fd, pack(Op::kWorker, id));
}

void Daemon::drop_worker(std::uint64_t id, const char* why, bool connection_polled) {
  const std::optional<AttachedWorker> taken = workers_.take(id);
  if (!taken) return;
  const AttachedWorker& worker = *taken;
  worker.model->router().close_device(worker.slot);
  worker.model->workers()->remove(worker.slot);
  const std::string dropped_for = worker.link->drop_reason();
  worker.link->hang_up(why != nullptr ? why : "it hung up");  // its running batches return and run elsewhere
  if (why != nullptr) {
    stats_.workers_dropped.fetch_add(1, std::memory_order_relaxed);
    warn_limited(LogKind::kViolation, "dropping {}: {}", worker.link->label(), why);
  } else if (!dropped_for.empty() && dropped_for != "stopped") {
    stats_.workers_dropped.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("{} dropped: {}", worker.link->label(), dropped_for);
  } else {
    spdlog::info("{} detached{}", worker.link->label(), dropped_for == "stopped" ? " after stopping" : "");
  }
  release_connection(worker.link->take_connection(), connection_polled ? pack(Op::kWorker, id) : 0);
}

void Daemon::drop_all_workers() {
  while (!workers_.empty()) {
    const std::uint64_t id = workers_.any_id();
    // The poll on its connection stays armed: the shutdown completes it, and that completion
    // releases the parked connection.
    drop_worker(id, nullptr, true);
  }
}

}  // namespace batchd

// The worker role of the handshake (docs/WORKERS.md): a worker process's own grant (it sees every
// client's inputs), the model it serves, and the region the daemon makes for it. A worker is a
// device to its model's router: it opens a place when it attaches; the daemon closes it whichever
// way the worker goes (daemon_peers.cpp).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/attach_handshake.hpp"
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

ModelPipeline* AttachHandshake::model_for_worker(PendingAttach& pending, const std::string& name) {
  const std::vector<ModelPipeline*>& workers_models = p_.models.served_by_workers();
  const auto served_by_workers = [&] {
    if (workers_models.empty()) return std::string("no model here is served by workers (backend = \"workers\")");
    std::string text = workers_models.size() == 1 ? "workers serve model " : "workers serve models ";
    for (std::size_t m = 0; m < workers_models.size(); ++m) {
      text += (m == 0 ? "" : ", ") + workers_models[m]->config().name;
    }
    return text;
  };
  ModelPipeline* named = p_.models.named(name);
  if (named != nullptr && !named->by_workers()) {
    refuse(pending, shm::AttachStatus::kBadHello,
           "model " + name + " runs the " + named->backend_name() +
               " backend inside the daemon, not in worker processes; " + served_by_workers());
    return nullptr;
  }
  if (named != nullptr) return named;
  // A worker of another name goes to the default model when workers serve it: the daemon of one
  // model takes workers of any name, as before models had names.
  if (p_.models.front().by_workers()) return &p_.models.front();
  if (workers_models.empty()) {
    refuse(pending, shm::AttachStatus::kBadHello,
           "this daemon runs the " + p_.models.front().backend_name() +
               " backend; workers attach to one started with --backend workers");
  } else {
    refuse(pending, shm::AttachStatus::kBadHello,
           "no model named " + name + " here; " + served_by_workers() +
               " (batchd-worker --model NAME, batchd.Worker(model=NAME))");
  }
  return nullptr;
}

void AttachHandshake::attach_worker(PendingAttach& pending, const shm::WorkerHello& hello, std::uint64_t id) {
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
  options.copied = &p_.stats.worker_pieces_copied;
  const unsigned place = p_.workers.free_place();
  if (place < shm::kStatusDevices) options.handoff = &p_.stats.latency.handoff_by_device[place];
  options.region.buffers = std::min(hello.concurrency, settings.workers.lanes_per_worker);
  options.region.max_inputs = std::min<std::uint32_t>(hello.max_inputs, model->limits().max_batch);
  options.region.max_input_bytes = std::max<std::uint64_t>(
      std::min(hello.max_bytes, model->limits().max_batch_bytes), p_.config.segment.max_input_bytes);
  options.region.max_output_bytes = p_.config.segment.max_output_bytes;
  options.region.output_capacity = std::max<std::uint64_t>(
      std::min(std::uint64_t{options.region.max_inputs} * p_.config.segment.max_output_bytes, kMaxOutputAreaBytes),
      p_.config.segment.max_output_bytes);
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
  p_.events.arm_poll(fd, pack(Op::kWorker, id));
  workers.install(*slot, link);
  router.open_device(*slot, link->buffers());
  p_.workers.add(id, AttachedWorker{model, *slot, link});
  spdlog::info("{} attached to model {} as device {} (uid {}, {} lanes, batches up to {} inputs / {} bytes)",
               link->label(), model->config().name, *slot, peer.uid, link->buffers(), options.region.max_inputs,
               options.region.max_input_bytes);
}

}  // namespace batchd

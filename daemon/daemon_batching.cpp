// The drain path: take requests from the clients' rings in turn and hand each to its model's
// pipeline (model_pipeline.cpp), which admits, batches and dispatches it.
#include <algorithm>

#include "daemon/daemon.hpp"

namespace batchd {

namespace {

// Requests taken from one client before moving to the next, so one busy client cannot starve
// the others within a drain pass.
constexpr unsigned kBurstPerClient = 32;

}  // namespace

void Daemon::admit(std::shared_ptr<ClientSession> session, const TakenRequest& taken, std::int64_t now_ns) {
  if (taken.model >= models_.size()) {
    // A client's bug, not a protocol breach: the request fails alone, the client stays.
    const std::string why = fmt::format("unknown model id {}: this daemon serves {} model(s), ids 0 to {}",
                                        taken.model, models_.size(), models_.size() - 1);
    completer_.reject(RequestRef{std::move(session), taken.slot, taken.generation, taken.deadline_mono_ns},
                      shm::WireStatus::kUnknownModel, why);
    return;
  }
  ModelPipeline& model = *models_[taken.model];
  model.note_taken(taken.priority, taken.input_bytes);
  model.admit(PendingRequest{std::move(session), taken, now_ns}, now_ns);
}

bool Daemon::fill_batches(std::int64_t now_ns) {
  bool progressed = false;
  for (auto& model : models_) progressed = model->fill_batches(now_ns) || progressed;
  return progressed;
}

bool Daemon::drain_rings(std::int64_t now_ns) {
  bool progressed = false;
  bool backlog = false;  // a client's burst was cut: its ring may hold more
  std::string why;
  const std::size_t clients = sessions_.size();
  for (std::size_t visited = 0; visited < clients && !sessions_.empty(); ++visited) {
    std::shared_ptr<ClientSession> session = sessions_.next_in_turn();

    unsigned taken_here = 0;
    for (; taken_here < kBurstPerClient; ++taken_here) {
      TakenRequest taken;
      const TakeResult result = session->take(taken, why);
      if (result == TakeResult::kEmpty) break;
      if (result == TakeResult::kViolation) {
        drop_session(session->id(), why.c_str());
        break;
      }
      session->mark_in_flight(taken.slot, taken.generation);
      session->pop();
      stats_.requests_taken.fetch_add(1, std::memory_order_relaxed);
      if (taken.downgraded) stats_.priority_downgrades.fetch_add(1, std::memory_order_relaxed);
      stats_.requests_taken_by_class[static_cast<std::size_t>(taken.priority)].fetch_add(1, std::memory_order_relaxed);
      admit(session, taken, now_ns);
      progressed = true;
    }
    backlog = backlog || taken_here == kBurstPerClient;
    session->publish();
  }
  for (auto& model : models_) model->end_pass(now_ns, backlog);
  return progressed;
}

}  // namespace batchd

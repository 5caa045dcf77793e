#include "daemon/executor.hpp"

#include <spdlog/spdlog.h>

#include "daemon/tsan_handoff.hpp"

namespace batchd {

Executor::Executor(Backend& backend, Completer& completer, unsigned spare_batches,
                   std::function<void()> on_batch_freed)
    : backend_(backend), completer_(completer), on_batch_freed_(std::move(on_batch_freed)) {
  const unsigned total = backend_.lanes() + spare_batches;
  for (unsigned i = 0; i < total; ++i) {
    batches_.push_back(std::make_unique<Batch>());
    free_.enqueue(batches_.back().get());
  }
}

Executor::~Executor() { stop(); }

void Executor::start() {
  for (unsigned lane = 0; lane < backend_.lanes(); ++lane) {
    workers_.emplace_back([this, lane] { worker(lane); });
  }
}

void Executor::stop() noexcept {
  if (workers_.empty()) return;
  for (std::size_t i = 0; i < workers_.size(); ++i) ready_.enqueue(nullptr);
  for (auto& t : workers_) t.join();
  workers_.clear();
}

Batch* Executor::try_acquire() noexcept {
  Batch* batch = nullptr;
  if (!free_.try_dequeue(batch)) return nullptr;
  handoff_acquire(batch);
  in_use_.fetch_add(1, std::memory_order_relaxed);
  return batch;
}

void Executor::dispatch(Batch* batch) noexcept {
  handoff_release(batch);
  ready_.enqueue(batch);
}

void Executor::release(Batch* batch) noexcept {
  batch->clear();
  handoff_release(batch);
  free_.enqueue(batch);
  in_use_.fetch_sub(1, std::memory_order_seq_cst);  // ordered before the sleeping-flag check
}

void Executor::worker(unsigned lane) noexcept {
  std::vector<ClientSession*> scratch;
  scratch.reserve(64);
  for (;;) {
    Batch* batch = nullptr;
    ready_.wait_dequeue(batch);
    if (batch == nullptr) return;
    handoff_acquire(batch);
    BackendStatus status;
    try {
      status = backend_.run(lane, batch->input(), batch->output);
    } catch (const std::exception& e) {
      status = BackendStatus::failure(e.what());
    }
    if (!status.ok) {
      spdlog::warn("batch {} of {} failed on {} lane {}: {}", batch->id, batch->size(),
                   backend_.name(), lane, status.message);
    }
    completer_.complete_batch(*batch, status, scratch);
    release(batch);
    on_batch_freed_();
  }
}

}  // namespace batchd

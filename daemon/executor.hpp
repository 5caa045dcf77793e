// Runs batches on the backend's lanes: one worker thread per lane takes ready batches, runs them,
// completes their requests and returns the batch object to the pool. The pool's size bounds
// the work queued inside the daemon; beyond it, requests wait in the clients' rings.
#pragma once

#include <concurrentqueue/blockingconcurrentqueue.h>
#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "daemon/backend.hpp"
#include "daemon/batch.hpp"
#include "daemon/completer.hpp"

namespace batchd {

class Executor {
 public:
  // on_batch_freed runs on a worker after each batch returns to the pool (the drain loop uses it
  // to wake itself when it was waiting for a batch object). Batches in the pool: lanes + spare.
  Executor(Backend& backend, Completer& completer, unsigned spare_batches,
           std::function<void()> on_batch_freed);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

  void start();
  // Runs every dispatched batch to completion, then joins the workers.
  void stop() noexcept;

  // Drain thread: an empty batch to fill, or nullptr when all are in use.
  [[nodiscard]] Batch* try_acquire() noexcept;
  // Drain thread: hands a filled batch to the lanes. Precondition: from try_acquire().
  void dispatch(Batch* batch) noexcept;
  // Returns an unused batch (acquired but never filled).
  void release(Batch* batch) noexcept;
  [[nodiscard]] bool all_free() const noexcept {
    return in_use_.load(std::memory_order_acquire) == 0;
  }

 private:
  void worker(unsigned lane) noexcept;

  Backend& backend_;
  Completer& completer_;
  std::function<void()> on_batch_freed_;
  std::vector<std::unique_ptr<Batch>> batches_;  // owns every batch; the queues borrow
  moodycamel::ConcurrentQueue<Batch*> free_;
  moodycamel::BlockingConcurrentQueue<Batch*> ready_;  // nullptr tells a worker to exit
  std::atomic<std::size_t> in_use_{0};
  std::vector<std::thread> workers_;
};

}  // namespace batchd

// The event waker: turns the daemon's completion events into readiness of the client's own
// eventfd. The daemon bumps a word in the completion region and wakes it with FUTEX_WAKE; it
// never writes to a descriptor the client holds, since a client can clear O_NONBLOCK on any open
// file description it shares and so make such a write block the daemon. The cost is one thread
// per event-driven client and one extra wake-up on the way to the event loop.
#include "client_lib/client_impl.hpp"
#include "shm/futex.hpp"

namespace batchd {

void ClientImpl::start_waker_locked() {
  if (waker_.joinable()) return;
  waker_ = std::thread([this] { wake_events(); });
}

void ClientImpl::wake_events() noexcept {
  std::shared_ptr<Segment> seg;
  std::uint32_t seen = 0;
  const auto done = [&](std::uint32_t sequence) {
    return sequence != seen || stopping_.load(std::memory_order_relaxed);
  };
  while (!stopping_.load(std::memory_order_acquire)) {
    {
      std::lock_guard lock(mu_);
      if (seg != current_) {
        // A reattach: events of the new daemon may predate this look, so the loop hears once.
        seg = current_;
        seen = seg->view.completion_events()->sequence.load(std::memory_order_acquire);
        signal_eventfd(event_fd_.get());
      }
    }
    std::atomic<std::uint32_t>& sequence = seg->view.completion_events()->sequence;
    // Slices bound how long a wake-up lost to a reattach or shutdown racing the sleep can delay.
    if (shm::wait_for_change(sequence, seg->view.event_waiter()->sleeping, kWakerBit, 0,
                             shm::monotonic_ns() + kWaitSliceNs, done) &&
        !stopping_.load(std::memory_order_relaxed)) {
      seen = sequence.load(std::memory_order_acquire);
      signal_eventfd(event_fd_.get());
    }
  }
}

void ClientImpl::stop_waker() noexcept {
  stopping_.store(true, std::memory_order_seq_cst);
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lock(mu_);
    seg = current_;
  }
  shm::futex_wake_all(seg->view.completion_events()->sequence);
  if (waker_.joinable()) waker_.join();
}

}  // namespace batchd

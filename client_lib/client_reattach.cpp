// The monitor thread: notices the daemon's connection closing, re-attaches to the next daemon on
// the same socket, and moves every pending request there.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>

#include "client_lib/client_impl.hpp"
#include "shm/futex.hpp"

namespace batchd {

void ClientImpl::monitor() noexcept {
  for (;;) {
    std::shared_ptr<Segment> seg;
    {
      std::lock_guard lock(mu_);
      seg = current_;
    }
    if (!wait_for_hangup(seg->connection.get())) return;
    mark_gone(*seg);
    std::shared_ptr<Segment> fresh = reattach();
    if (!fresh) return;
    install(std::move(fresh));
  }
}

// Returns true when the daemon's connection closed, false when the client is shutting down.
bool ClientImpl::wait_for_hangup(int connection) noexcept {
  pollfd fds[2] = {{connection, POLLIN | POLLRDHUP, 0}, {stop_fd_.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;
    if ((fds[1].revents & POLLIN) != 0) return false;
    if ((fds[0].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      char buf[64];
      const ssize_t n = ::recv(connection, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && errno == EAGAIN)) continue;  // the daemon sends nothing today
      return true;
    }
  }
}

void ClientImpl::mark_gone(Segment& seg) noexcept {
  attached_.store(false, std::memory_order_release);
  seg.dead.store(true, std::memory_order_seq_cst);
  // Wake every sleeper so it sees the daemon is gone and waits for the reattach instead
  // (FUTEX_WAKE works on a read-only mapping).
  for (std::uint32_t i = 0; i < seg.view.slot_count(); ++i) {
    shm::futex_wake_all(seg.view.completion_slot(i)->state);
  }
  if (event_fd_.valid()) signal_eventfd(event_fd_.get());
}

// Tries to attach to a (new) daemon until one answers; nullptr when the client shuts down.
std::shared_ptr<Segment> ClientImpl::reattach() noexcept {
  for (;;) {
    if (auto attachment = attach_to_daemon(socket_path_, kReattachTry)) {
      if (auto fresh = make_segment(std::move(*attachment), epoch_ + 1)) {
        ++epoch_;
        return std::move(*fresh);
      }
    }
    pollfd stop{stop_fd_.get(), POLLIN, 0};
    if (::poll(&stop, 1, kReattachRestMs) > 0) return nullptr;
  }
}

void ClientImpl::install(std::shared_ptr<Segment> fresh) noexcept {
  std::shared_ptr<Segment> old;
  {
    std::lock_guard lock(mu_);
    old = std::exchange(current_, fresh);
    move_requests_locked(*old, fresh);
    look_everywhere_ = true;
    max_input_bytes_.store(fresh->max_input_bytes(), std::memory_order_relaxed);
    slot_count_.store(fresh->view.slot_count(), std::memory_order_relaxed);
    attached_.store(true, std::memory_order_release);
    reattach_seq_.fetch_add(1, std::memory_order_seq_cst);
    fresh->ring_doorbell_if_sleeping();
  }
  shm::futex_wake_all(reattach_seq_);
  // A caller that checked its old slot just before the segment died may sleep there still.
  for (std::uint32_t i = 0; i < old->view.slot_count(); ++i) {
    shm::futex_wake_all(old->view.completion_slot(i)->state);
  }
  if (event_fd_.valid()) signal_eventfd(event_fd_.get());
}

// Moves every request of the dead segment that is neither answered nor past its deadline into
// the fresh one. Answered ones stay where their caller reads them (the caller's Location keeps
// the old segment mapped); expired ones are left for their caller to time out; abandoned slots
// are dropped with the old segment.
void ClientImpl::move_requests_locked(Segment& old, const std::shared_ptr<Segment>& fresh) noexcept {
  const std::int64_t now_ns = shm::monotonic_ns();
  for (std::uint32_t slot = 0; slot < old.slots.size(); ++slot) {
    SlotState& state = old.slots[slot];
    Request* waiter = state.waiter;
    if (state.use != Use::kSync || waiter == nullptr || old.slot_done(slot, state.generation) ||
        waiter->deadline_ns <= now_ns) {
      continue;
    }
    move_one_locked(*waiter, Use::kSync, fresh);
  }
  for (AsyncRequest& request : async_) {
    const Location& at = request.at;
    if (at.segment.get() != &old || request.failure || old.slot_done(at.slot, at.generation) ||
        request.deadline_ns <= now_ns) {
      continue;
    }
    move_one_locked(request, Use::kAsync, fresh);
    if (request.at.segment == fresh) {
      fresh->slots[request.at.slot].async_index = static_cast<std::uint32_t>(&request - async_.data());
    }
  }
  fresh->publish();
}

void ClientImpl::move_one_locked(Request& request, Use use, const std::shared_ptr<Segment>& fresh) noexcept {
  Segment& old = *request.at.segment;
  SlotState& old_state = old.slots[request.at.slot];
  old_state.use = Use::kFree;  // the old segment is never written again
  old_state.waiter = nullptr;
  const shm::RequestSlotHeader& header = *old.view.request_slot(request.at.slot);
  const std::uint32_t bytes = header.input_bytes;  // written by this process
  if (bytes > fresh->max_input_bytes()) {
    request.failure = Error{ErrorCode::kTooLarge,
                            fmt::format("the restarted daemon's input limit of {} bytes is below this "
                                        "input's {} bytes", fresh->max_input_bytes(), bytes)};
    return;
  }
  if (auto unknown = resolve_model_locked(*fresh, request)) {
    request.failure = std::move(unknown);
    return;
  }
  if (fresh->free.empty()) {
    request.failure = Error{ErrorCode::kOverloaded,
                            fmt::format("the restarted daemon gives this client only {} request slots, "
                                        "fewer than were in flight", fresh->view.slot_count())};
    return;
  }
  const std::uint32_t slot = fresh->free.back();
  fresh->free.pop_back();
  const std::uint32_t generation = fresh->write_request(slot, old.view.request_input(request.at.slot), bytes,
                                                       request.deadline_ns, request.priority, use,
                                                       request.request_id, request.model,
                                                       request.cache_scope, request.trace);
  if (use == Use::kSync) fresh->slots[slot].waiter = &request;
  // The fresh ring is empty and as large as its slot table, so this cannot fail.
  (void)fresh->stage(slot);
  request.at = Location{fresh, slot, generation};
}

// ---- submitting ----------------------------------------------------------------------------

}  // namespace batchd

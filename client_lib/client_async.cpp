// The asynchronous half of ClientImpl: submit_async and the batch behind submit_many_async and
// submit_all_async, cancel, and poll() (with poll_wait and event_fd), which settle what the
// daemon's finished list names.
#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "client_lib/client_impl.hpp"
#include "shm/futex.hpp"
#include "shm/layout.hpp"

namespace batchd {

std::optional<Error> ClientImpl::submit_async(std::string_view input,
                                              std::chrono::milliseconds timeout, const RequestOptions& options,
                                              Client::Callback done, std::uint64_t* id) {
  if (auto bad = check_input(input)) return bad;
  AsyncRequest request;
  request.deadline_ns = deadline_after(timeout);
  request.priority = wire_priority(options.priority);
  request.cache_scope = options.cache_scope;
  request.trace = options.trace;
  request.done = std::move(done);
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lock(mu_);
    if (event_fd_wanted_.load(std::memory_order_relaxed)) start_waker_locked();
    std::string cached;
    if (auto bad = write_locked(input, options.model, Use::kAsync, request, &cached)) return bad;
    request.id = ++next_async_id_;
    if (id != nullptr) *id = request.id;
    if (!request.cached) {
      current_->publish();
      track_async_locked(std::move(request));
      return std::nullopt;
    }
    answer_locally_locked(request, std::move(cached));
    seg = current_;
  }
  wake_for_local_answers(*seg);
  return std::nullopt;
}

void ClientImpl::answer_locally_locked(AsyncRequest& request, std::string answer) {
  local_answers_.emplace_back(std::move(request.done), Result::success(std::move(answer)));
}

void ClientImpl::wake_for_local_answers(const Segment& seg) noexcept {
  if (event_fd_wanted_.load(std::memory_order_relaxed)) signal_eventfd(event_fd_.get());
  local_answers_waiting_.store(true, std::memory_order_seq_cst);
  if ((seg.view.event_waiter()->sleeping.load(std::memory_order_seq_cst) & kPollWaiterBit) != 0) {
    shm::futex_wake_all(seg.view.completion_events()->sequence);
  }
}

namespace {

// All or none: the submissions not refused on their own get the first refusal, so the caller
// sees one reason for the whole submission. Returns whether any was refused.
bool refuse_all_if_any(std::span<Client::AsyncSubmission> submissions) {
  const auto refused = [](const Client::AsyncSubmission& s) { return s.refused.has_value(); };
  const auto first = std::find_if(submissions.begin(), submissions.end(), refused);
  if (first == submissions.end()) return false;
  const Error reason = *first->refused;
  for (Client::AsyncSubmission& s : submissions) {
    if (!s.refused) s.refused = reason;
  }
  return true;
}

}  // namespace

std::size_t ClientImpl::submit_async_batch(std::span<Client::AsyncSubmission> submissions,
                                           std::chrono::milliseconds timeout, bool all_or_none) {
  const std::int64_t deadline_ns = deadline_after(timeout);
  for (Client::AsyncSubmission& s : submissions) s.refused = check_input(s.input);
  if (all_or_none && refuse_all_if_any(submissions)) return 0;
  std::size_t admitted = 0;
  std::size_t answered = 0;  // from the cache
  std::unique_lock lock(mu_);
  if (all_or_none) {
    if (std::optional<Error> short_of_slots = check_free_slots_locked(submissions.size())) {
      for (Client::AsyncSubmission& s : submissions) s.refused = short_of_slots;
      return 0;
    }
  }
  if (event_fd_wanted_.load(std::memory_order_relaxed)) start_waker_locked();
  for (Client::AsyncSubmission& s : submissions) {
    if (s.refused) continue;
    AsyncRequest request;
    request.deadline_ns = deadline_ns;
    request.priority = wire_priority(s.priority);
    request.cache_scope = s.cache_scope;
    request.trace = s.trace;
    std::string cached;
    if ((s.refused = write_locked(s.input, s.model, Use::kAsync, request, &cached))) continue;
    request.done = std::move(s.done);
    request.id = ++next_async_id_;
    s.id = request.id;
    ++admitted;
    if (request.cached) {
      answer_locally_locked(request, std::move(cached));
      ++answered;
      continue;
    }
    track_async_locked(std::move(request));
  }
  if (all_or_none && admitted != submissions.size()) {
    // Free slots enough means ring room enough (it holds one entry per slot), so this is not
    // expected; but if the ring did refuse one, those written go out withdrawn and unanswered.
    take_back_locked(submissions);
    admitted = 0;
    refuse_all_if_any(submissions);
  }
  current_->publish();
  if (answered > 0) {
    const std::shared_ptr<Segment> seg = current_;
    lock.unlock();
    wake_for_local_answers(*seg);
  }
  return admitted;
}

void ClientImpl::take_back_locked(std::span<Client::AsyncSubmission> submissions) noexcept {
  for (auto s = submissions.rbegin(); s != submissions.rend(); ++s) {
    if (s->refused) continue;
    if (async_.empty() || async_.back().id != s->id) {  // answered from the cache: no slot
      s->done = std::move(local_answers_.back().first);
      s->id = 0;
      local_answers_.pop_back();
      continue;
    }
    AsyncRequest& request = async_.back();
    s->done = std::move(request.done);
    s->id = 0;
    release_locked(request.at);
    async_.pop_back();
  }
}

void ClientImpl::cancel(std::span<const std::uint64_t> ids) {
  if (ids.empty()) return;
  std::vector<std::uint64_t> sorted;
  if (std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<>()) != ids.end()) {
    // Not strictly increasing (a FanOut's are: ids are handed out in order), so sort a copy.
    sorted.assign(ids.begin(), ids.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    ids = sorted;
  }
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lock(mu_);
    seg = current_;
    mark_cancelled_locked(ids);
  }
  wake_for_cancel(*seg);
}

void ClientImpl::mark_cancelled_locked(std::span<const std::uint64_t> sorted_ids) {
  const std::int64_t now_ns = shm::monotonic_ns();
  std::size_t found = 0;
  for (AsyncRequest& request : async_) {
    if (!std::binary_search(sorted_ids.begin(), sorted_ids.end(), request.id)) continue;
    // One already answered or past its deadline is finished: poll() reports it as such.
    const Location& at = request.at;
    const bool finished = at.segment->slot_done(at.slot, at.generation) || now_ns >= request.deadline_ns;
    // Settled by the next poll(), which releases the slot and so withdraws the request from
    // the daemon if it has not taken it yet.
    if (!request.failure && !finished) {
      request.failure = Error{ErrorCode::kCancelled, "withdrawn by the caller"};
    }
    if (++found == sorted_ids.size()) break;
  }
}

void ClientImpl::wake_for_cancel(const Segment& seg) noexcept {
  if (event_fd_wanted_.load(std::memory_order_relaxed)) signal_eventfd(event_fd_.get());
  // poll_wait sleeps on the daemon's event word, which a cancel does not move.
  cancels_.fetch_add(1, std::memory_order_seq_cst);
  if ((seg.view.event_waiter()->sleeping.load(std::memory_order_seq_cst) & kPollWaiterBit) != 0) {
    shm::futex_wake_all(seg.view.completion_events()->sequence);
  }
}

void ClientImpl::track_async_locked(AsyncRequest&& request) {
  const Location& at = request.at;
  at.segment->slots[at.slot].async_index = static_cast<std::uint32_t>(async_.size());
  async_.push_back(std::move(request));
}

void ClientImpl::untrack_async_locked(std::size_t i) noexcept {
  if (i + 1 != async_.size()) {
    async_[i] = std::move(async_.back());
    const Location& moved = async_[i].at;
    moved.segment->slots[moved.slot].async_index = static_cast<std::uint32_t>(i);
  }
  async_.pop_back();
}

// Settles an async request if it failed or is past its deadline, or, with `look_everywhere`,
// if its slot says it is answered (normally the finished list says so: see poll()).
std::optional<Result> ClientImpl::settle_locked(AsyncRequest& request, std::int64_t now_ns,
                                                bool look_everywhere) {
  const Location& at = request.at;
  std::optional<Result> result;
  if (request.failure) {
    result = Result::failure(request.failure->code, std::move(request.failure->message));
  } else if (look_everywhere && at.segment->slot_done(at.slot, at.generation)) {
    result = at.segment->read_result(at.slot);
  } else if (now_ns >= request.deadline_ns) {
    result = at.segment->dead.load(std::memory_order_acquire)
                 ? Result::failure(ErrorCode::kDaemonUnavailable,
                                   fmt::format("no answer before the deadline: the batchd daemon at {} "
                                               "went away and no daemon came back in time", socket_path_))
                 : Result::failure(ErrorCode::kTimeout, "no answer before the deadline");
  } else {
    return std::nullopt;
  }
  release_locked(at);
  return result;
}

void ClientImpl::settle_finished_locked() {
  Segment& seg = *current_;
  for (const shm::RingEntry entry : finished_entries_) {
    const std::uint32_t slot = shm::ring_entry_slot(entry);
    const std::uint32_t generation = shm::ring_entry_generation(entry);
    const std::uint32_t i = seg.slots[slot].async_index;
    if (i >= async_.size()) continue;
    AsyncRequest& request = async_[i];
    const Location& at = request.at;
    // The list is a hint: the slot's own state decides. A failed request is the scan's.
    if (at.segment.get() != &seg || at.slot != slot || at.generation != generation || request.failure ||
        !seg.slot_done(slot, generation)) {
      continue;
    }
    finished_.emplace_back(std::move(request.done), seg.read_result(slot));
    release_locked(at);
    untrack_async_locked(i);
  }
}

int ClientImpl::event_fd() noexcept {
  if (!event_fd_wanted_.exchange(true, std::memory_order_acq_rel)) {
    std::lock_guard lock(mu_);
    try {
      start_waker_locked();
    } catch (const std::system_error&) {
      // No thread to be had: the fd still wakes for cancels and reattaches, and poll(), which
      // must run every few milliseconds while requests are pending, still finds every answer.
    }
  }
  return event_fd_.get();
}

std::size_t ClientImpl::poll_wait(std::chrono::microseconds max_wait) {
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lock(mu_);
    seg = current_;
  }
  const std::atomic<std::uint32_t>& sequence = seg->view.completion_events()->sequence;
  if (poll_wait_segment_ == seg.get()) {
    const std::uint32_t seen = poll_wait_seen_;
    const auto changed = [&](std::uint32_t now_seen) {
      return now_seen != seen || cancels_.load(std::memory_order_relaxed) != 0 ||
             local_answers_waiting_.load(std::memory_order_relaxed) || seg->dead.load(std::memory_order_relaxed);
    };
    const std::int64_t deadline_ns = shm::monotonic_ns() +
                                      std::chrono::duration_cast<std::chrono::nanoseconds>(max_wait).count();
    (void)shm::wait_for_change(sequence, seg->view.event_waiter()->sleeping, kPollWaiterBit, 0, deadline_ns,
                               changed);
  }
  // A new segment (or the first call) polls at once: its events may predate this look.
  poll_wait_segment_ = seg.get();
  poll_wait_seen_ = sequence.load(std::memory_order_acquire);
  return poll();
}

std::size_t ClientImpl::poll() {
  if (event_fd_wanted_.load(std::memory_order_relaxed)) {
    std::uint64_t counter = 0;
    [[maybe_unused]] const ssize_t n = ::read(event_fd_.get(), &counter, sizeof(counter));
  }
  const bool cancelled = cancels_.exchange(0, std::memory_order_relaxed) != 0;
  const std::int64_t now_ns = shm::monotonic_ns();
  finished_.clear();
  {
    std::lock_guard lock(mu_);
    local_answers_waiting_.store(false, std::memory_order_relaxed);
    if (!local_answers_.empty()) {
      for (auto& answered : local_answers_) finished_.push_back(std::move(answered));
      local_answers_.clear();
    }
    finished_entries_.clear();
    const bool lost = !current_->collect_finished(finished_entries_);
    settle_finished_locked();
    // After a reattach, answers may sit in the old segment's slots, which no list names.
    const bool look_everywhere = lost || std::exchange(look_everywhere_, false);
    // Failures (cancels, a reattach that could not move a request) and deadlines are found by a
    // scan of the client's own memory, at most every kDeadlineScanNs unless something asks.
    if (look_everywhere || cancelled || now_ns >= next_scan_ns_) {
      next_scan_ns_ = now_ns + kDeadlineScanNs;
      for (std::size_t i = 0; i < async_.size();) {
        std::optional<Result> result = settle_locked(async_[i], now_ns, look_everywhere);
        if (!result) {
          ++i;
          continue;
        }
        finished_.emplace_back(std::move(async_[i].done), std::move(*result));
        untrack_async_locked(i);
      }
    }
  }
  for (auto& [callback, result] : finished_) {
    if (callback) callback(std::move(result));
  }
  const std::size_t count = finished_.size();
  finished_.clear();
  return count;
}

}  // namespace batchd

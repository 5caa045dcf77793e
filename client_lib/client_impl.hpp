// The client library's implementation behind batchd::Client: submission and sync answers
// (client.cpp), asynchronous requests and poll() (client_async.cpp), and the monitor that re-attaches to a restarted daemon (client_reattach.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client_lib/client.hpp"
#include "client_lib/attempt.hpp"
#include "client_lib/client_segment.hpp"
#include "shm/fd.hpp"

namespace batchd {

namespace client_detail {

// A sleeping caller re-checks its request this often, so a daemon that vanishes is noticed even
// if the monitor's wake raced with the caller going to sleep.
constexpr std::int64_t kWaitSliceNs = 100'000'000;
// While no daemon is attached a sync caller also looks at its old slot this often: a daemon that
// stops cleanly may still answer there after it closed the connection.
constexpr std::int64_t kDetachedPollNs = 10'000'000;
// Each reattach try waits this long for a daemon, then the monitor rests kReattachRestMs (and
// checks for shutdown) before the next try.
constexpr auto kReattachTry = std::chrono::milliseconds(100);
constexpr int kReattachRestMs = 20;
// Bits of shm::EventWaiter::sleeping: the event waker thread's, and a poll_wait caller's.
constexpr std::uint32_t kWakerBit = 1U << 0;
constexpr std::uint32_t kPollWaiterBit = 1U << 1;
// poll() looks for expired asynchronous requests at most this often (answers it finds at once,
// through the daemon's finished list): a deadline is in milliseconds, and a scan costs a look at
// every request in flight.
constexpr std::int64_t kDeadlineScanNs = 1'000'000;
// Distinct model names one client may use (the daemon serves at most shm::kStatusModels).
constexpr std::size_t kMaxModelNames = 256;

}  // namespace client_detail

using namespace client_detail;  // NOLINT: this header is the library's own, never installed

class ClientImpl {
 public:
  ClientImpl(std::shared_ptr<Segment> segment, shm::UniqueFd event_fd, const ClientOptions& options,
             std::string socket_path);
  ~ClientImpl();

  Result submit(std::string_view input, std::chrono::milliseconds timeout, const RequestOptions& options);
  std::vector<Result> submit_many(std::span<const std::string_view> inputs, std::chrono::milliseconds timeout,
                                  const RequestOptions& options);
  std::optional<Error> submit_async(std::string_view input, std::chrono::milliseconds timeout,
                                    const RequestOptions& options, Client::Callback done, std::uint64_t* id);
  // submit_many_async, and with `all_or_none` submit_all_async. Returns how many were admitted.
  std::size_t submit_async_batch(std::span<Client::AsyncSubmission> submissions,
                                 std::chrono::milliseconds timeout, bool all_or_none);
  void cancel(std::span<const std::uint64_t> ids);
  std::size_t poll();

  std::size_t poll_wait(std::chrono::microseconds max_wait);
  int event_fd() noexcept;
  [[nodiscard]] bool connected() const noexcept { return attached_.load(std::memory_order_acquire); }
  [[nodiscard]] std::uint32_t max_input_bytes() const noexcept {
    return max_input_bytes_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint32_t slot_count() const noexcept { return slot_count_.load(std::memory_order_relaxed); }
  [[nodiscard]] DaemonStatus daemon_status() const;

 private:
  std::optional<Error> check_input(std::string_view input) const;
  // Claims a slot in the current segment, writes the request (with request.deadline_ns and
  // request.priority, for `model`) and stages it in the ring; the caller then publishes the
  // current segment once for all it wrote. Fills `request.at` and its model. With `cached`, the
  // daemon's response cache is looked in first: a hit is copied there, request.cached is set,
  // and no slot is taken.
  std::optional<Error> write_locked(std::string_view input, std::string_view model, Use use, Request& request,
                                    std::string* cached = nullptr);
  // An async request answered from the cache: its callback runs from the next poll().
  void answer_locally_locked(AsyncRequest& request, std::string answer);
  // Lets poll() and poll_wait() know answers from the cache wait.
  void wake_for_local_answers(const Segment& seg) noexcept;
  // The client's index for a model name (0: the default model), added on first use.
  Attempt<std::uint16_t> intern_model_locked(std::string_view name);
  // Sets request.model to the id `seg`'s daemon gives request.model_name, or says it serves none.
  std::optional<Error> resolve_model_locked(Segment& seg, Request& request);
  // Gives the slot a request holds back: free at once if no daemon can still write it, else
  // withdrawn and reused once the daemon answers it.
  void release_locked(const Location& at) noexcept;
  // Whether the current segment has `needed` free slots, once the abandoned ones the daemon has
  // answered are reclaimed; else the kOverloaded error that says so.
  std::optional<Error> check_free_slots_locked(std::size_t needed);
  // Takes back the admitted ones among `submissions`, the newest asynchronous requests: each
  // callback goes back to its submission and never runs, each slot is released (withdrawn).
  void take_back_locked(std::span<Client::AsyncSubmission> submissions) noexcept;
  // Marks the requests with these ids (strictly increasing) cancelled, for poll() to settle.
  void mark_cancelled_locked(std::span<const std::uint64_t> sorted_ids);
  // Lets poll() and poll_wait() know a cancel happened.
  void wake_for_cancel(const Segment& seg) noexcept;
  Result wait_sync(Request& request, std::chrono::milliseconds timeout);
  Result finish_sync(Request& request, const Location& at);
  // How long a sync caller spins before it sleeps, from how long answers have been taking.
  [[nodiscard]] std::int64_t spin_budget_ns() const noexcept;
  void note_answer_time(std::int64_t ns) noexcept;
  Result expire_locked(Request& request, std::chrono::milliseconds timeout);
  std::optional<Result> settle_locked(AsyncRequest& request, std::int64_t now_ns, bool look_everywhere);
  // Settles the requests the daemon's finished list named (finished_entries_).
  void settle_finished_locked();
  // async_ with each request's index kept in its slot's SlotState::async_index.
  void track_async_locked(AsyncRequest&& request);
  void untrack_async_locked(std::size_t i) noexcept;

  // The event waker (client_events.cpp): sleeps on the daemon's completion event word and
  // signals event_fd_, which only this process holds. Started by the first submit_async.
  void start_waker_locked();
  void wake_events() noexcept;
  void stop_waker() noexcept;

  void monitor() noexcept;
  bool wait_for_hangup(int connection) noexcept;
  void mark_gone(Segment& seg) noexcept;
  std::shared_ptr<Segment> reattach() noexcept;
  void install(std::shared_ptr<Segment> fresh) noexcept;
  void move_requests_locked(Segment& old, const std::shared_ptr<Segment>& fresh) noexcept;
  void move_one_locked(Request& request, Use use, const std::shared_ptr<Segment>& fresh) noexcept;

  ClientOptions options_;
  std::string socket_path_;
  shm::UniqueFd event_fd_;
  shm::UniqueFd stop_fd_;  // tells the monitor thread to exit

  mutable std::mutex mu_;  // serializes the rings' producers and all the bookkeeping below
  std::shared_ptr<Segment> current_;
  std::vector<AsyncRequest> async_;
  // The next poll() must check every request's slot, not only those the finished list names: a
  // reattach moved requests, or answered ones stayed in the old segment.
  bool look_everywhere_ = false;  // guarded by mu_
  std::vector<shm::RingEntry> finished_entries_;  // poll()'s scratch, guarded by mu_
  std::int64_t next_scan_ns_ = 0;                 // poll()'s next deadline scan, guarded by mu_
  std::uint64_t next_async_id_ = 0;  // guarded by mu_
  // The model names requests used, by the client's index (Request::model_name); [0] is the
  // default model. Guarded by mu_; at most kMaxModelNames.
  std::vector<std::string> model_names_{std::string()};
  std::uint64_t epoch_ = 1;  // the monitor's alone

  std::vector<std::pair<Client::Callback, Result>> finished_;  // poll()'s scratch
  // Async requests answered from the response cache, for the next poll(). Guarded by mu_.
  std::vector<std::pair<Client::Callback, Result>> local_answers_;
  std::atomic<bool> local_answers_waiting_{false};  // poll_wait returns at once
  std::atomic<bool> attached_{true};
  std::atomic<std::uint32_t> max_input_bytes_{0}, slot_count_{0};
  // Bumped (under mu_) by every reattach; a process-local futex word that callers whose daemon
  // is gone sleep on.
  std::atomic<std::uint32_t> reattach_seq_{0};
  unsigned max_spinners_ = 1;              // options_.max_spinning_callers, resolved
  // Sync callers inside wait_sync. A caller spins only if it saw at most max_spinners_ of them,
  // itself and every spinner included, so no separate count of spinners is needed.
  std::atomic<unsigned> sync_waiters_{0};
  std::atomic<std::int64_t> answer_ns_{0};  // moving average of sync round trips, 0 unmeasured
  std::thread monitor_;
  std::atomic<bool> event_fd_wanted_{false};  // event_fd() was called: keep its readiness
  // poll_wait's: the completion event count it last saw, and in which segment.
  std::atomic<std::uint32_t> cancels_{0};  // since the last poll(): poll_wait returns at once
  const Segment* poll_wait_segment_ = nullptr;
  std::uint32_t poll_wait_seen_ = 0;
  std::atomic<bool> stopping_{false};  // the waker's signal to exit
  std::thread waker_;                  // started under mu_
};

}  // namespace batchd

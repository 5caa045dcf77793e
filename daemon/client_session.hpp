// The daemon's side of one attached client: its segment (created and owned here), the consumer
// end of its ring, and a private record of which slots are in flight. Everything read from the
// segment is untrusted; see take().
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "base/expected.hpp"
#include "daemon/stats.hpp"
#include "shm/cache_writer.hpp"
#include "shm/fd.hpp"
#include "shm/layout.hpp"
#include "shm/ring.hpp"
#include "shm/segment_view.hpp"
#include "shm/trace_context.hpp"

namespace batchd {

// One request read out of a client's segment and checked; input points into shared memory and
// must be copied before use.
struct TakenRequest {
  std::uint32_t slot = 0;
  std::uint32_t generation = 0;
  std::int64_t deadline_mono_ns = 0;
  std::uint32_t input_bytes = 0;
  const std::byte* input = nullptr;
  shm::WirePriority priority = shm::WirePriority::kNormal;  // checked: one of the three classes
  std::uint64_t request_id = 0;  // the client's; any value is harmless (shm::RequestSlotHeader)
  std::uint32_t model = 0;       // as the client wrote it: checked at admission
  std::uint32_t cache_scope = 0;  // the client's; any value is harmless (shm::RequestSlotHeader)
  shm::TraceContext trace{};      // the caller's, to trace it under; none when not valid
  bool downgraded = false;  // claimed a class above its client's grant, and runs at the grant
};

enum class TakeResult { kEmpty, kTaken, kViolation };

class ClientSession {
 public:
  // Creates the client's segment, or says why it could not (out of memory or descriptors). The
  // connection is handed over only once this succeeded (set_connection), so a refusal can still
  // be sent on it. `granted`: the highest class the operator lets this client's user run at; a
  // request claiming more runs at it. Precondition: shm::check_params(params) succeeded.
  static Expected<std::unique_ptr<ClientSession>> create(std::uint64_t id,
                                                         const shm::SegmentParams& params,
                                                         pid_t pid, uid_t uid,
                                                         shm::WirePriority granted) noexcept;
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] int connection() const noexcept { return connection_.get(); }
  void set_connection(shm::UniqueFd connection) noexcept { connection_ = std::move(connection); }
  // Drain thread: takes the connection out, for the daemon to close where a peer cannot stall it.
  [[nodiscard]] shm::UniqueFd release_connection() noexcept { return std::move(connection_); }
  [[nodiscard]] shm::WirePriority granted() const noexcept { return granted_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] uid_t uid() const noexcept { return uid_; }
  [[nodiscard]] const shm::SegmentView& view() const noexcept { return view_; }
  [[nodiscard]] int request_fd() const noexcept { return request_fd_.get(); }
  [[nodiscard]] int completion_fd() const noexcept { return completion_fd_.get(); }
  // Its user's response-cache segment (daemon/response_caches.hpp), set once at attach before
  // any other thread sees the session.
  void set_cache(std::shared_ptr<shm::CacheWriter> cache) noexcept { cache_ = std::move(cache); }
  [[nodiscard]] shm::CacheWriter* cache() const noexcept { return cache_.get(); }
  // Drain thread: adds what the client's own cache hits grew by since the last call (as it
  // reports them in its segment: shm::CacheHitCounts) to each model's counters. A report that
  // shrinks or leaps is not credited: a client can misreport itself only, and never by much.
  void credit_cache_hits(std::span<ModelCounters> models) noexcept;
  // This client's own doorbell: a client that reads or floods it affects only its own wake-ups.
  [[nodiscard]] int doorbell_fd() const noexcept { return doorbell_.get(); }
  // Resets the doorbell after it woke the drain loop. The client shares the doorbell's open file
  // description and may clear its O_NONBLOCK; the read says RWF_NOWAIT itself, so it never
  // blocks whatever the client did (doorbell_reads_never_block() checks the kernel at start).
  void drain_doorbell() const noexcept;

  // Tells the client's event waker that answers flagged kNotifyEventfd were written. Any thread;
  // a shared-memory word and FUTEX_WAKE, so it cannot block on anything the client holds.
  void signal_events() const noexcept;
  // Any thread: appends answered asynchronous requests to the client's finished list (see
  // shm::FinishedTail), after their completions are written. Never waits on the client.
  void publish_finished(std::span<const shm::RingEntry> entries) noexcept;

  // Drain thread only. Peeks the next ring entry and validates it against the segment's bounds
  // and this session's private slot table. kViolation fills `why`; the caller must then drop the
  // client. Does not consume: call pop() once the request has been copied out.
  TakeResult take(TakenRequest& out, std::string& why) noexcept;
  void pop() noexcept { ring_.pop(); }
  // Publishes the consumer position so the producer sees freed ring space.
  void publish() noexcept { ring_.publish(); }
  // Whether the producer has published entries not yet taken (re-reads the untrusted tail).
  [[nodiscard]] bool has_pending() noexcept;

  // Marks a taken request in flight, before it is popped.
  void mark_in_flight(std::uint32_t slot, std::uint32_t generation) noexcept {
    in_flight_[slot].store(generation, std::memory_order_relaxed);
  }
  // Any thread: the request's completion is written; the slot may be reused once the client
  // sees DONE. Must precede the DONE store (see Completer).
  void clear_in_flight(std::uint32_t slot) noexcept {
    in_flight_[slot].store(0, std::memory_order_release);
  }

  // The connection closed or the client broke the protocol: take nothing more from it.
  void mark_closed() noexcept { closed_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_relaxed); }

 private:
  ClientSession(std::uint64_t id, pid_t pid, uid_t uid, shm::WirePriority granted) noexcept
      : id_(id), pid_(pid), uid_(uid), granted_(granted) {}
  // Creates, maps and seals both regions and writes the header.
  Expected<void> make_segment(const shm::SegmentParams& params) noexcept;

  std::uint64_t id_;
  shm::UniqueFd connection_;
  pid_t pid_;
  uid_t uid_;
  shm::WirePriority granted_;
  shm::UniqueFd request_fd_;
  shm::UniqueFd completion_fd_;
  shm::UniqueFd doorbell_;
  boost::interprocess::mapped_region request_map_;
  boost::interprocess::mapped_region completion_map_;
  shm::SegmentView view_;
  std::shared_ptr<shm::CacheWriter> cache_;
  std::array<std::uint64_t, shm::kCacheHitModels> credited_hits_{}, credited_hit_ns_{};  // drain thread's
  shm::RingConsumer ring_;
  // Per slot: the generation the daemon holds in flight, 0 if none. The daemon's own truth,
  // never shared: a client resubmitting a busy slot is caught here.
  std::unique_ptr<std::atomic<std::uint32_t>[]> in_flight_;
  std::atomic<bool> closed_{false};
  // The finished list's producer position: the daemon's own copy, never read back from shared
  // memory. Lanes complete batches of one client concurrently, hence the lock.
  std::mutex finished_mu_;
  std::uint64_t finished_tail_ = 0;  // guarded by finished_mu_
};

// Whether this kernel reads an eventfd with preadv2(RWF_NOWAIT) without blocking even when the
// descriptor is in blocking mode (Linux 5.12 and later). The daemon refuses to start without it.
bool doorbell_reads_never_block() noexcept;

}  // namespace batchd

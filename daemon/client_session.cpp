#include "daemon/client_session.hpp"

#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <new>

#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"
#include "shm/untrusted.hpp"

namespace batchd {

Expected<std::unique_ptr<ClientSession>> ClientSession::create(std::uint64_t id,
                                                               const shm::SegmentParams& params,
                                                               pid_t pid, uid_t uid,
                                                               shm::WirePriority granted) noexcept {
  // Allocated without exceptions: a client's attach must not throw, even out of memory.
  std::unique_ptr<ClientSession> session(new (std::nothrow) ClientSession(id, pid, uid, granted));
  if (session == nullptr) return errno_failure("client session", ENOMEM);
  if (auto made = session->make_segment(params); !made) return made.error();
  session->in_flight_.reset(new (std::nothrow) std::atomic<std::uint32_t>[params.slot_count]);
  if (session->in_flight_ == nullptr) return errno_failure("in-flight table", ENOMEM);
  for (std::uint32_t i = 0; i < params.slot_count; ++i) session->in_flight_[i].store(0);
  session->doorbell_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!session->doorbell_.valid()) return errno_failure("eventfd");
  return session;
}

Expected<void> ClientSession::make_segment(const shm::SegmentParams& params) noexcept {
  const shm::Geometry g = shm::compute_geometry(params);
  auto request_fd = shm::create_memfd("batchd-requests", g.request_region_bytes);
  if (!request_fd) return request_fd.error();
  request_fd_ = std::move(*request_fd);
  auto completion_fd = shm::create_memfd("batchd-completions", g.completion_region_bytes);
  if (!completion_fd) return completion_fd.error();
  completion_fd_ = std::move(*completion_fd);
  auto request_map = shm::map_fd(request_fd_.get(), g.request_region_bytes, true);
  if (!request_map) return request_map.error();
  request_map_ = std::move(*request_map);
  auto completion_map = shm::map_fd(completion_fd_.get(), g.completion_region_bytes, true);
  if (!completion_map) return completion_map.error();
  completion_map_ = std::move(*completion_map);
  if (auto sealed = shm::seal_memfd(request_fd_.get(), false); !sealed) return sealed;
  if (auto sealed = shm::seal_memfd(completion_fd_.get(), true); !sealed) return sealed;
  view_ = shm::SegmentView(g, request_map_.get_address(), completion_map_.get_address());
  *view_.header() = shm::make_header(g);
  ring_ = shm::RingConsumer(view_.ring_tail(), view_.ring_entries(), view_.completion_header(),
                            params.slot_count);
  return {};
}

namespace {

// Reads an eventfd's counter without ever sleeping, whatever its file status flags say.
ssize_t read_nowait(int fd, std::uint64_t& value) noexcept {
  iovec iov{&value, sizeof(value)};
  return ::preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
}

}  // namespace

void ClientSession::credit_cache_hits(std::span<ModelCounters> models) noexcept {
  // Far more than a client can look up in one tally period (0.1 s at ~3 M lookups/s per core).
  constexpr std::uint64_t kMostHits = 1'000'000'000, kMostNs = 1'000'000'000'000;
  const shm::CacheHitCounts& reported = *view_.cache_hits();
  const std::size_t n = std::min<std::size_t>(models.size(), shm::kCacheHitModels);
  for (std::size_t m = 0; m < n; ++m) {
    const std::uint64_t hits = reported.hits[m].load(std::memory_order_relaxed);
    if (hits == credited_hits_[m]) continue;
    const std::uint64_t ns = reported.hit_ns[m].load(std::memory_order_relaxed);
    if (hits < credited_hits_[m] || hits - credited_hits_[m] > kMostHits || ns < credited_hit_ns_[m] ||
        ns - credited_hit_ns_[m] > kMostNs) {
      continue;
    }
    models[m].cache_hits.fetch_add(hits - credited_hits_[m], std::memory_order_relaxed);
    models[m].cache_hit_ns.fetch_add(ns - credited_hit_ns_[m], std::memory_order_relaxed);
    credited_hits_[m] = hits;
    credited_hit_ns_[m] = ns;
  }
}

void ClientSession::drain_doorbell() const noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] const ssize_t n = read_nowait(doorbell_.get(), value);
}

void ClientSession::signal_events() const noexcept {
  shm::bump_and_wake(view_.completion_events()->sequence, view_.event_waiter()->sleeping);
}

void ClientSession::publish_finished(std::span<const shm::RingEntry> entries) noexcept {
  if (entries.empty()) return;
  shm::RingEntry* list = view_.finished_entries();
  const std::uint64_t mask = view_.finished_capacity() - 1;
  std::lock_guard lock(finished_mu_);
  for (const shm::RingEntry entry : entries) shm::store_once(list[finished_tail_++ & mask], entry);
  view_.finished_tail()->tail.store(finished_tail_, std::memory_order_release);
}

bool doorbell_reads_never_block() noexcept {
  // Blocking mode and an empty counter: a plain read would sleep here forever.
  shm::UniqueFd probe(::eventfd(0, EFD_CLOEXEC));
  if (!probe.valid()) return false;
  std::uint64_t value = 0;
  return read_nowait(probe.get(), value) < 0 && errno == EAGAIN;
}

bool ClientSession::has_pending() noexcept {
  if (closed()) return false;
  if (ring_.available() > 0) return true;
  // A bad tail counts as pending so the caller goes on to take() and reports the violation.
  return !ring_.refresh() || ring_.available() > 0;
}

TakeResult ClientSession::take(TakenRequest& out, std::string& why) noexcept {
  if (closed()) return TakeResult::kEmpty;
  if (ring_.available() == 0) {
    if (!ring_.refresh()) {
      why = "submission ring tail moved backwards or past the ring's capacity";
      return TakeResult::kViolation;
    }
    if (ring_.available() == 0) return TakeResult::kEmpty;
  }
  const shm::RingEntry entry = ring_.peek();
  const std::uint32_t slot = shm::ring_entry_slot(entry);
  const std::uint32_t generation = shm::ring_entry_generation(entry);
  const auto& params = view_.geometry().params;
  if (slot >= params.slot_count) {
    why = fmt::format("ring entry names slot {} of {}", slot, params.slot_count);
    return TakeResult::kViolation;
  }
  if (generation == 0 || generation > shm::kGenerationMask) {
    why = fmt::format("ring entry for slot {} has impossible generation {}", slot, generation);
    return TakeResult::kViolation;
  }
  if (in_flight_[slot].load(std::memory_order_acquire) != 0) {
    why = fmt::format("slot {} submitted again while still in flight", slot);
    return TakeResult::kViolation;
  }
  const shm::RequestSlotHeader& header = *view_.request_slot(slot);
  const std::uint32_t input_bytes = shm::load_once(header.input_bytes);
  if (input_bytes > params.max_input_bytes) {
    why = fmt::format("slot {} claims {} input bytes, limit {}", slot, input_bytes,
                      params.max_input_bytes);
    return TakeResult::kViolation;
  }
  const std::uint32_t priority = shm::load_once(header.priority);
  if (priority >= shm::kWirePriorities) {
    why = fmt::format("slot {} claims priority {}; only 0 (normal), 1 (high) and 2 (low) exist", slot,
                      priority);
    return TakeResult::kViolation;
  }
  out.slot = slot;
  out.generation = generation;
  out.deadline_mono_ns = shm::load_once(header.deadline_mono_ns);
  out.input_bytes = input_bytes;
  out.input = view_.request_input(slot);
  out.priority = static_cast<shm::WirePriority>(priority);
  // A claim above the grant runs at the grant (high is the only class above normal).
  out.downgraded = out.priority == shm::WirePriority::kHigh && granted_ != shm::WirePriority::kHigh;
  if (out.downgraded) out.priority = granted_;
  out.request_id = shm::load_once(header.request_id);
  out.model = shm::load_once(header.model);
  out.cache_scope = shm::load_once(header.cache_scope);
  const std::uint64_t trace_words[3] = {shm::load_once(header.trace_id[0]), shm::load_once(header.trace_id[1]),
                                        shm::load_once(header.trace_parent)};
  std::memcpy(out.trace.trace_id.data(), trace_words, sizeof out.trace.trace_id);
  std::memcpy(out.trace.span_id.data(), trace_words + 2, sizeof out.trace.span_id);
  if (!out.trace.valid()) out.trace = {};
  return TakeResult::kTaken;
}

}  // namespace batchd

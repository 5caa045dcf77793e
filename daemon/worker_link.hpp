// One attached worker process as the daemon's lanes see it: the region the daemon created for it
// (shm/worker_region.hpp), its control connection (the lease), and running a batch on one of its
// buffers. Everything the worker writes is read once, bounds-checked and copied out before use;
// a worker that breaks the protocol is hung up on and its batch returns as a device fault, to run
// elsewhere. No call here waits on the worker beyond a bounded futex wait that its hang-up ends.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "base/expected.hpp"
#include "daemon/input_arena.hpp"
#include "daemon/stats.hpp"
#include "shm/fd.hpp"
#include "shm/spin_advisor.hpp"
#include "shm/worker_region.hpp"

namespace batchd {

// Who a worker is, for logs and status. name and version are printable ASCII.
struct WorkerIdentity {
  std::uint64_t id = 0;  // the daemon's connection id
  unsigned slot = 0;     // the device it is
  pid_t pid = 0;
  uid_t uid = 0;
  std::string name;
  std::string version;
  // Its place among the workers on the status page, daemon-wide (kNoPlace: past the page's).
  static constexpr unsigned kNoPlace = ~0U;
  unsigned place = kNoPlace;
};

struct WorkerLinkOptions {
  shm::WorkerRegionParams region;
  // How long a lane spins for the worker's answer before it sleeps: a futex wake costs tens of
  // microseconds on a VM, more than most hand-offs.
  std::chrono::microseconds spin{50};
  // Where each batch's hand-off time goes (borrowed; none: not recorded).
  LatencyHistogram* handoff = nullptr;
  // Where the drain loop assembles batches (borrowed; none: every batch is copied to the worker).
  const InputArena* arena = nullptr;
  // Counts the pieces copied instead (borrowed; none: not counted).
  std::atomic<std::uint64_t>* copied = nullptr;
};

class WorkerLink {
 public:
  static Expected<std::shared_ptr<WorkerLink>> create(WorkerIdentity who, const WorkerLinkOptions& options);
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;
  ~WorkerLink();

  [[nodiscard]] const WorkerIdentity& who() const noexcept { return who_; }
  [[nodiscard]] int region_fd() const noexcept { return region_fd_.get(); }
  [[nodiscard]] unsigned buffers() const noexcept { return header_.buffers; }
  // "worker 3 (langid 1.0, pid 1234)"
  [[nodiscard]] const std::string& label() const noexcept { return label_; }

  // Lane threads: runs a batch on buffer `buffer` (< buffers()), in pieces within the worker's
  // limits. A device fault when the worker has gone, is stopping or breaks the protocol. Throws
  // only what allocating a status message may throw (the router catches it).
  BackendStatus run(unsigned buffer, const BatchInput& in, BatchOutput& out);

  // Any thread: drops the worker. Its runs return device faults and its connection is shut down,
  // so the daemon's poll on it fires. Never blocks; the first reason is kept.
  void hang_up(std::string_view why) noexcept;
  // The worker said it is stopping: no new run starts, and it is hung up on once none runs.
  void begin_stopping() noexcept;
  [[nodiscard]] bool gone() const noexcept { return gone_.load(std::memory_order_acquire); }
  // Why it was hung up on (empty: it was not).
  [[nodiscard]] std::string drop_reason() const;
  [[nodiscard]] std::uint64_t batches() const noexcept { return batches_.load(std::memory_order_relaxed); }

  // The daemon's attach thread: the control connection, owned here so that hang_up can shut it
  // down from any thread while the attach thread polls it.
  void set_connection(shm::UniqueFd connection);
  [[nodiscard]] int connection_fd() const;
  shm::UniqueFd take_connection();

 private:
  WorkerLink(WorkerIdentity who, const WorkerLinkOptions& options);

  BackendStatus run_pieces(unsigned buffer, const BatchInput& in, BatchOutput& out);
  BackendStatus run_piece(unsigned buffer, const BatchInput& in, std::size_t first, std::size_t count,
                          BatchOutput& out);
  // Tells the worker where a piece's inputs are: in the arena as they stand, or copied into the
  // buffer's input area when the batch is not in the arena.
  void submit_inputs(unsigned buffer, const BatchInput& in, std::size_t first, std::size_t count);
  // Waits for buffer's answer to seq; false when the worker went first.
  bool await_answer(unsigned buffer, std::uint32_t seq) noexcept;
  // Checks and copies out an answer of `count` outputs.
  BackendStatus collect(unsigned buffer, std::size_t count, BatchOutput& out);
  BackendStatus violation(const std::string& what);
  BackendStatus gone_status() const;
  void hang_up_locked(std::string_view why) noexcept;

  WorkerIdentity who_;
  std::string label_;
  std::int64_t spin_ns_ = 0;
  LatencyHistogram* handoff_ = nullptr;
  const InputArena* arena_ = nullptr;
  std::atomic<std::uint64_t>* copied_ = nullptr;
  shm::UniqueFd region_fd_;
  boost::interprocess::mapped_region map_;
  shm::WorkerRegionHeader header_{};  // the daemon's own copy: never re-read from the region
  void* base_ = nullptr;
  std::vector<std::uint32_t> seq_;  // per buffer: the last submission; a buffer runs one batch at a time
  std::vector<shm::SpinAdvisor> spin_;  // per buffer: whether answers come within the spin

  mutable std::mutex mu_;  // guards connection_, running_, stopping_, why_
  shm::UniqueFd connection_;
  unsigned running_ = 0;
  bool stopping_ = false;
  std::string why_;
  std::atomic<bool> gone_{false};
  std::atomic<std::uint64_t> batches_{0};
};

}  // namespace batchd

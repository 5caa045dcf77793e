#include "client_lib/worker.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "client_lib/attach.hpp"
#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"
#include "shm/spin_advisor.hpp"
#include "shm/untrusted.hpp"

namespace batchd {
namespace {

// A lane asleep on its next batch looks at the connection's state this often.
constexpr std::int64_t kRecheckNs = 100'000'000;
// After telling the daemon it stops, a worker waits this long at most for the daemon to hang up
// (it does once this worker's running batches are answered).
constexpr int kStopWaitMs = 60'000;
constexpr std::size_t kMaxMessageBytes = 240;

void copy_field(char (&field)[shm::kWorkerNameBytes], const std::string& text) {
  std::memset(field, 0, sizeof(field));
  std::memcpy(field, text.data(), std::min(text.size(), sizeof(field) - 1));
}

}  // namespace

bool WorkerBatch::append(std::string_view output) noexcept {
  char* to = append_in_place(output.size());
  if (to == nullptr) return false;
  std::memcpy(to, output.data(), output.size());
  return true;
}

char* WorkerBatch::append_in_place(std::size_t n) noexcept {
  if (refusal_ != nullptr) return nullptr;
  if (outputs_ >= count_) {
    refusal_ = "more outputs than inputs";
  } else if (n > max_output_bytes_) {
    refusal_ = "an output is larger than the daemon's --max-output-bytes";
  } else if (used_ + n > output_capacity_) {
    refusal_ = "the batch's outputs pass the room the daemon gave them";
  }
  if (refusal_ != nullptr) return nullptr;
  char* to = output_bytes_ + used_;
  used_ += n;
  ++outputs_;
  output_offsets_[outputs_] = static_cast<std::uint32_t>(used_);
  return to;
}

struct Worker::Impl {
  WorkerOptions options;
  std::uint32_t id = 0;
  shm::UniqueFd connection;
  shm::UniqueFd region_fd;
  boost::interprocess::mapped_region map;
  boost::interprocess::mapped_region arena;  // the daemon's input arena, read-only
  shm::WorkerRegionHeader header{};  // checked at attach; the daemon writes it once
  shm::UniqueFd stop_fd;             // eventfd: stop() writes it (async-signal-safe)
  std::atomic<bool> ended{false};

  void serve_lane(unsigned buffer, const WorkerHandler& handler) noexcept;
  void run_batch(unsigned buffer, const WorkerHandler& handler) noexcept;
  // Points the batch at its inputs (the buffer's, or the arena's, whose offsets are copied out
  // into `offsets` rebased to 0); false when the submission is malformed.
  bool find_inputs(const shm::WorkerDescriptor& d, char* data, WorkerBatch& batch,
                   std::vector<std::uint32_t>& offsets) const noexcept;
  WorkerEnd watch_connection() noexcept;
};

std::unique_ptr<Worker> Worker::connect(const WorkerOptions& options, Error* error) {
  const auto fail = [error](ErrorCode code, std::string message) -> std::unique_ptr<Worker> {
    if (error != nullptr) *error = {code, std::move(message)};
    return nullptr;
  };
  shm::WorkerHello hello{};
  hello.hello = {shm::kAttachMagic, shm::kProtocolVersion, shm::kHelloWorker, 0};
  hello.concurrency = std::clamp(options.concurrency, 1U, shm::kMaxWorkerBuffers);
  hello.max_inputs = std::max<std::uint32_t>(options.max_inputs, 1);
  hello.max_bytes = std::max<std::uint64_t>(options.max_bytes, 1);
  copy_field(hello.name, options.name);
  copy_field(hello.version, options.version);
  const std::string path = options.socket_path.empty() ? client_default_socket_path() : options.socket_path;
  auto attached = attach_worker_to_daemon(path, options.attach_timeout, hello);
  if (!attached) return fail(attached.error().code, attached.error().message);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->id = attached->client_id;
  impl->connection = std::move(attached->connection);
  impl->region_fd = std::move(attached->fds.at(shm::kWorkerRegionFd));
  const Expected<std::uint64_t> bytes = shm::file_bytes(impl->region_fd.get());
  if (!bytes || *bytes < sizeof(shm::WorkerRegionHeader)) {
    return fail(ErrorCode::kProtocolError, "the daemon's worker region is too small to hold its header");
  }
  auto map = shm::map_fd(impl->region_fd.get(), *bytes, true);
  if (!map) return fail(ErrorCode::kProtocolError, "cannot map the worker region: " + map.error().message);
  impl->map = std::move(*map);
  std::memcpy(&impl->header, impl->map.get_address(), sizeof(impl->header));
  if (auto checked = shm::check_worker_region(impl->header, *bytes); !checked) {
    return fail(ErrorCode::kProtocolError, checked.error().message);
  }
  const shm::UniqueFd arena_fd = std::move(attached->fds.at(shm::kInputArenaFd));
  const Expected<std::uint64_t> arena_bytes = shm::file_bytes(arena_fd.get());
  if (!arena_bytes || *arena_bytes == 0) return fail(ErrorCode::kProtocolError, "the daemon's input arena is empty");
  auto arena = shm::map_fd(arena_fd.get(), *arena_bytes, false);
  if (!arena) return fail(ErrorCode::kProtocolError, "cannot map the daemon's input arena: " + arena.error().message);
  impl->arena = std::move(*arena);
  impl->stop_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->stop_fd.valid()) return fail(ErrorCode::kProtocolError, std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::Worker(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Worker::~Worker() = default;

unsigned Worker::concurrency() const noexcept { return impl_->header.buffers; }
std::uint32_t Worker::max_inputs() const noexcept { return impl_->header.max_inputs; }
std::uint64_t Worker::max_bytes() const noexcept { return impl_->header.max_input_bytes; }
std::uint32_t Worker::worker_id() const noexcept { return impl_->id; }

void Worker::stop() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->stop_fd.get(), &one, sizeof(one));
}

WorkerEnd Worker::serve(const WorkerHandler& handler) {
  Impl& w = *impl_;
  std::vector<std::thread> lanes;
  for (unsigned b = 0; b < w.header.buffers; ++b) {
    lanes.emplace_back([&w, &handler, b] { w.serve_lane(b, handler); });
  }
  const WorkerEnd end = w.watch_connection();
  w.ended.store(true, std::memory_order_release);
  void* base = w.map.get_address();
  for (unsigned b = 0; b < w.header.buffers; ++b) {
    shm::futex_wake_all(shm::worker_descriptor(base, w.header, b).submit.seq);
  }
  for (std::thread& lane : lanes) lane.join();
  return end;
}

WorkerEnd Worker::Impl::watch_connection() noexcept {
  bool stopping = false;
  for (;;) {
    pollfd fds[2] = {{connection.get(), POLLIN | POLLRDHUP, 0}, {stop_fd.get(), POLLIN, 0}};
    const int ready = ::poll(fds, 2, stopping ? kStopWaitMs : -1);
    if (ready < 0 && errno == EINTR) continue;
    // The daemon says nothing after the handshake: anything on the connection is its end.
    if (ready <= 0 || fds[0].revents != 0) return stopping ? WorkerEnd::kStopped : WorkerEnd::kDaemonGone;
    if ((fds[1].revents & POLLIN) != 0 && !stopping) {
      std::uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(stop_fd.get(), &count, sizeof(count));
      const shm::WorkerNotice notice{shm::kWorkerNoticeMagic, shm::WorkerNoticeKind::kStopping};
      // A daemon that is gone shows as the connection's end on the next poll.
      (void)shm::send_with_fds(connection.get(), std::as_bytes(std::span(&notice, 1)), {});
      stopping = true;
    }
  }
}

void Worker::Impl::serve_lane(unsigned buffer, const WorkerHandler& handler) noexcept {
  shm::WorkerDescriptor& d = shm::worker_descriptor(map.get_address(), header, buffer);
  // What this worker answered last (0 on a fresh region): the daemon may have submitted a batch
  // before this thread started, which must count as new.
  std::uint32_t seen = d.done.seq.load(std::memory_order_acquire);
  const std::int64_t spin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options.spin).count();
  // Spins for the next batch only while batches come that soon, and only after work: an idle
  // worker sleeps.
  shm::SpinAdvisor advisor;
  bool after_work = true;
  while (!ended.load(std::memory_order_acquire)) {
    const std::int64_t started_ns = shm::monotonic_ns();
    const bool arrived = shm::wait_for_change(d.submit.seq, d.submit.worker_waiting, 1,
                                              after_work && advisor.pays() ? spin_ns : 0,
                                              started_ns + kRecheckNs,
                                              [seen](std::uint32_t now) { return now != seen; });
    if (after_work) advisor.note_wait(arrived ? shm::monotonic_ns() - started_ns : kRecheckNs, spin_ns);
    after_work = arrived;
    if (!arrived) continue;
    seen = d.submit.seq.load(std::memory_order_acquire);
    shm::store_once(d.done.picked_ns, shm::monotonic_ns());
    run_batch(buffer, handler);
    shm::store_once(d.done.answered_ns, shm::monotonic_ns());
    shm::store_and_wake(d.done.seq, seen, d.done.daemon_waiting, 1);
  }
}

void Worker::Impl::run_batch(unsigned buffer, const WorkerHandler& handler) noexcept {
  void* base = map.get_address();
  shm::WorkerDescriptor& d = shm::worker_descriptor(base, header, buffer);
  char* data = shm::worker_buffer(base, header, buffer);
  WorkerBatch batch;
  batch.lane_ = buffer;
  batch.count_ = shm::load_once(d.submit.count);
  batch.output_bytes_ = data + header.output_bytes_at;
  batch.output_offsets_ = reinterpret_cast<std::uint32_t*>(data + header.output_offsets_at);
  batch.output_capacity_ = header.output_capacity;
  batch.max_output_bytes_ = header.max_output_bytes;
  batch.output_offsets_[0] = 0;
  thread_local std::vector<std::uint32_t> arena_offsets;
  std::string failure;
  const bool well_formed = find_inputs(d, data, batch, arena_offsets);
  if (!well_formed) {
    failure = "the daemon sent a malformed batch descriptor";
  } else {
    try {
      handler(batch);
      if (batch.refusal_ != nullptr) {
        failure = batch.refusal_;
      } else if (batch.outputs_ != batch.count_) {
        failure = fmt::format("the model returned {} outputs for {} inputs", batch.outputs_, batch.count_);
      }
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "the model threw something other than a std::exception";
    }
  }
  if (failure.empty()) {
    shm::store_once(d.done.status, shm::kWorkerOk);
    shm::store_once(d.done.count, static_cast<std::uint32_t>(batch.outputs_));
    shm::store_once(d.done.output_bytes, batch.used_);
    return;
  }
  const std::size_t n = std::min({failure.size(), kMaxMessageBytes, static_cast<std::size_t>(header.output_capacity)});
  std::memcpy(batch.output_bytes_, failure.data(), n);
  shm::store_once(d.done.status, shm::kWorkerFailed);
  shm::store_once(d.done.count, std::uint32_t{0});
  shm::store_once(d.done.output_bytes, std::uint64_t{n});
}

bool Worker::Impl::find_inputs(const shm::WorkerDescriptor& d, char* data, WorkerBatch& batch,
                               std::vector<std::uint32_t>& offsets) const noexcept {
  const std::uint64_t input_bytes = shm::load_once(d.submit.input_bytes);
  const std::uint32_t count = batch.count_;
  if (count == 0 || count > header.max_inputs || input_bytes > header.max_input_bytes) return false;
  const std::uint32_t source = shm::load_once(d.submit.source);
  if (source == shm::kInputsInBuffer) {
    batch.input_bytes_ = data + header.input_bytes_at;
    batch.input_offsets_ = reinterpret_cast<const std::uint32_t*>(data + header.input_offsets_at);
  } else if (source == shm::kInputsInArena) {
    // Copied out first: a daemon that gave up on this worker may reuse the slot under it.
    const std::uint64_t offsets_at = shm::load_once(d.submit.arena_offsets_at);
    const std::uint64_t bytes_at = shm::load_once(d.submit.arena_bytes_at);
    const std::uint64_t size = arena.get_size();
    const std::uint64_t offsets_bytes = (std::uint64_t{count} + 1) * sizeof(std::uint32_t);
    if (offsets_at % alignof(std::uint32_t) != 0 || offsets_at > size || offsets_bytes > size - offsets_at ||
        bytes_at > size) {
      return false;
    }
    const char* base = static_cast<const char*>(arena.get_address());
    try {
      offsets.resize(count + 1);  // count <= max_inputs: grows on a lane's first batches only
    } catch (const std::bad_alloc&) {
      return false;
    }
    std::memcpy(offsets.data(), base + offsets_at, offsets_bytes);
    const std::uint32_t first = offsets[0];
    if (first > size - bytes_at) return false;
    for (std::uint32_t& o : offsets) o -= first;  // checked below: a wrap shows as a huge offset
    batch.input_bytes_ = base + bytes_at + first;
    batch.input_offsets_ = offsets.data();
    if (input_bytes > size - bytes_at - first) return false;
  } else {
    return false;
  }
  if (batch.input_offsets_[0] != 0 || batch.input_offsets_[count] != input_bytes) return false;
  for (std::size_t i = 0; i < count; ++i) {
    if (batch.input_offsets_[i] > batch.input_offsets_[i + 1]) return false;
  }
  return true;
}

}  // namespace batchd

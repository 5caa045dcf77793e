#include "daemon/worker_link.hpp"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cstring>
#include <new>

#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"
#include "shm/untrusted.hpp"
#include "text/ascii.hpp"

namespace batchd {
namespace {

// A lane asleep on a worker's answer looks at the worker's state this often: a hang-up wakes it at
// once, so this only bounds a wake-up lost to a worker that scribbles the sequence word.
constexpr std::int64_t kRecheckNs = 50'000'000;
constexpr std::size_t kMaxMessageBytes = 240;

}  // namespace

WorkerLink::WorkerLink(WorkerIdentity who, const WorkerLinkOptions& options)
    : who_(std::move(who)),
      spin_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(options.spin).count()),
      handoff_(options.handoff),
      arena_(options.arena),
      copied_(options.copied) {
  label_ = fmt::format("worker {} ({} {}, pid {})", who_.id, who_.name, who_.version, who_.pid);
}

WorkerLink::~WorkerLink() = default;

Expected<std::shared_ptr<WorkerLink>> WorkerLink::create(WorkerIdentity who, const WorkerLinkOptions& options) {
  auto layout = shm::worker_region_layout(options.region);
  if (!layout) return layout.error();
  std::shared_ptr<WorkerLink> link(new WorkerLink(std::move(who), options));
  auto fd = shm::create_memfd("batchd-worker", layout->region_bytes);
  if (!fd) return fd.error();
  auto map = shm::map_fd(fd->get(), layout->region_bytes, true);
  if (!map) return map.error();
  // Its size only: the worker maps it read-write (it writes its answers there).
  if (auto sealed = shm::seal_memfd(fd->get(), false); !sealed) return sealed.error();
  link->region_fd_ = std::move(*fd);
  link->map_ = std::move(*map);
  link->base_ = link->map_.get_address();
  link->header_ = *layout;
  std::memcpy(link->base_, &link->header_, sizeof(link->header_));
  for (std::uint32_t b = 0; b < layout->buffers; ++b) {
    new (&shm::worker_descriptor(link->base_, link->header_, b)) shm::WorkerDescriptor{};
  }
  link->seq_.assign(layout->buffers, 0);
  link->spin_.resize(layout->buffers);
  return link;
}

BackendStatus WorkerLink::gone_status() const {
  std::lock_guard lock(mu_);
  return BackendStatus::device_gone(label_ + (gone_.load(std::memory_order_relaxed) ? " was dropped: " + why_
                                                                                    : std::string(" is stopping")));
}

BackendStatus WorkerLink::run(unsigned buffer, const BatchInput& in, BatchOutput& out) {
  {
    std::lock_guard lock(mu_);
    if (gone_.load(std::memory_order_relaxed) || stopping_ || buffer >= header_.buffers) {
      return BackendStatus::device_gone(label_ + " takes no more batches");
    }
    ++running_;
  }
  BackendStatus status;
  try {
    status = run_pieces(buffer, in, out);
  } catch (const std::exception& e) {  // out of memory copying the outputs
    status = BackendStatus::failure(e.what());
  }
  std::lock_guard lock(mu_);
  if (--running_ == 0 && stopping_) hang_up_locked("stopped");
  if (status.ok) batches_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

BackendStatus WorkerLink::run_pieces(unsigned buffer, const BatchInput& in, BatchOutput& out) {
  for (std::size_t first = 0; first < in.size();) {
    // The largest piece within the worker's limits; an input alone past them fails alone.
    std::size_t count = 0;
    while (first + count < in.size() && count < header_.max_inputs &&
           in.offsets[first + count + 1] - in.offsets[first] <= header_.max_input_bytes) {
      ++count;
    }
    if (count == 0) {
      return BackendStatus::failure(fmt::format("an input of {} bytes is larger than {}'s batches ({} bytes)",
                                                in.at(first).size(), label_, header_.max_input_bytes));
    }
    BackendStatus status = run_piece(buffer, in, first, count, out);
    if (!status.ok) return status;
    first += count;
  }
  return BackendStatus::success();
}

BackendStatus WorkerLink::run_piece(unsigned buffer, const BatchInput& in, std::size_t first, std::size_t count,
                                    BatchOutput& out) {
  const std::int64_t submitted_ns = shm::monotonic_ns();  // the hand-off's time includes any copy in
  submit_inputs(buffer, in, first, count);
  shm::WorkerDescriptor& d = shm::worker_descriptor(base_, header_, buffer);
  const std::uint32_t seq = ++seq_[buffer];
  shm::store_and_wake(d.submit.seq, seq, d.submit.worker_waiting, 1);
  if (!await_answer(buffer, seq)) return gone_status();
  if (handoff_ != nullptr) {
    // The round trip less the model's time as the worker tells it: a worker that lies spoils only
    // its own statistic (the histogram clamps what is negative).
    const std::int64_t model_ns = shm::load_once(d.done.answered_ns) - shm::load_once(d.done.picked_ns);
    handoff_->record(shm::monotonic_ns() - submitted_ns - std::max<std::int64_t>(model_ns, 0));
  }
  return collect(buffer, count, out);
}

void WorkerLink::submit_inputs(unsigned buffer, const BatchInput& in, std::size_t first, std::size_t count) {
  shm::WorkerDescriptor& d = shm::worker_descriptor(base_, header_, buffer);
  const std::uint32_t start = in.offsets[first];
  const std::uint32_t bytes = in.offsets[first + count] - start;
  shm::store_once(d.submit.count, static_cast<std::uint32_t>(count));
  shm::store_once(d.submit.input_bytes, std::uint64_t{bytes});
  const std::uint32_t* offsets_at = in.offsets.data() + first;
  if (arena_ != nullptr && arena_->holds(offsets_at, (count + 1) * sizeof(std::uint32_t)) &&
      arena_->holds(in.bytes.data(), in.bytes.size())) {
    shm::store_once(d.submit.source, shm::kInputsInArena);
    shm::store_once(d.submit.arena_offsets_at, arena_->offset_of(offsets_at));
    shm::store_once(d.submit.arena_bytes_at, arena_->offset_of(in.bytes.data()));
    return;
  }
  char* data = shm::worker_buffer(base_, header_, buffer);
  auto* offsets = reinterpret_cast<std::uint32_t*>(data + header_.input_offsets_at);
  for (std::size_t i = 0; i <= count; ++i) shm::store_once(offsets[i], in.offsets[first + i] - start);
  if (bytes > 0) std::memcpy(data + header_.input_bytes_at, in.bytes.data() + start, bytes);
  shm::store_once(d.submit.source, shm::kInputsInBuffer);
  if (copied_ != nullptr) copied_->fetch_add(1, std::memory_order_relaxed);
}

bool WorkerLink::await_answer(unsigned buffer, std::uint32_t seq) noexcept {
  shm::WorkerDescriptor& d = shm::worker_descriptor(base_, header_, buffer);
  // A model slower than the spin would only have the lane burn a core it needs.
  shm::SpinAdvisor& advisor = spin_[buffer];
  const std::int64_t started_ns = shm::monotonic_ns();
  std::int64_t spin_ns = advisor.pays() ? spin_ns_ : 0;
  for (;;) {
    if (shm::wait_for_change(d.done.seq, d.done.daemon_waiting, 1, spin_ns, shm::monotonic_ns() + kRecheckNs,
                             [seq](std::uint32_t seen) { return seen == seq; })) {
      advisor.note_wait(shm::monotonic_ns() - started_ns, spin_ns_);
      return true;
    }
    if (gone_.load(std::memory_order_acquire)) return false;
    spin_ns = 0;
  }
}

BackendStatus WorkerLink::collect(unsigned buffer, std::size_t count, BatchOutput& out) {
  const shm::WorkerDescriptor& d = shm::worker_descriptor(base_, header_, buffer);
  const std::int32_t status = shm::load_once(d.done.status);
  const std::uint32_t outputs = shm::load_once(d.done.count);
  const std::uint64_t bytes = shm::load_once(d.done.output_bytes);
  const char* data = shm::worker_buffer(base_, header_, buffer);
  if (bytes > header_.output_capacity) {
    return violation(fmt::format("claimed {} output bytes in a buffer of {}", bytes, header_.output_capacity));
  }
  if (status == shm::kWorkerFailed) {
    std::string message(std::min<std::size_t>(bytes, kMaxMessageBytes), '\0');
    std::memcpy(message.data(), data + header_.output_bytes_at, message.size());
    message = text::printable(message);
    return BackendStatus::failure(message.empty() ? label_ + " failed the batch" : message);
  }
  if (status != shm::kWorkerOk) return violation(fmt::format("answered with status {}", status));
  if (outputs != count) return violation(fmt::format("answered {} outputs for {} inputs", outputs, count));
  thread_local std::vector<std::uint32_t> offsets;
  offsets.resize(count + 1);
  std::memcpy(offsets.data(), data + header_.output_offsets_at, (count + 1) * sizeof(std::uint32_t));
  if (offsets[0] != 0 || offsets[count] != bytes) {
    return violation(fmt::format("output offsets run from {} to {}, not 0 to {}", offsets[0], offsets[count], bytes));
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (offsets[i + 1] < offsets[i]) return violation(fmt::format("output {} ends before it starts", i));
    if (offsets[i + 1] - offsets[i] > header_.max_output_bytes) {
      return violation(fmt::format("output {} is {} bytes, past the limit of {}", i, offsets[i + 1] - offsets[i],
                                   header_.max_output_bytes));
    }
  }
  const std::size_t base = out.bytes.size();
  if (base + bytes > UINT32_MAX) return BackendStatus::failure("a batch's outputs passed 4 GiB");
  out.bytes.resize(base + bytes);
  std::memcpy(out.bytes.data() + base, data + header_.output_bytes_at, bytes);
  for (std::size_t i = 1; i <= count; ++i) out.offsets.push_back(static_cast<std::uint32_t>(base + offsets[i]));
  return BackendStatus::success();
}

BackendStatus WorkerLink::violation(const std::string& what) {
  hang_up(what);
  return BackendStatus::device_gone(label_ + " broke the protocol: " + what);
}

void WorkerLink::hang_up(std::string_view why) noexcept {
  std::lock_guard lock(mu_);
  hang_up_locked(why);
}

void WorkerLink::hang_up_locked(std::string_view why) noexcept {
  if (gone_.load(std::memory_order_relaxed)) return;
  try {
    why_.assign(why);
  } catch (...) {
    why_.clear();
  }
  gone_.store(true, std::memory_order_release);
  if (connection_.valid()) ::shutdown(connection_.get(), SHUT_RDWR);
  for (std::uint32_t b = 0; b < header_.buffers; ++b) {
    shm::futex_wake_all(shm::worker_descriptor(base_, header_, b).done.seq);
  }
}

void WorkerLink::begin_stopping() noexcept {
  std::lock_guard lock(mu_);
  stopping_ = true;
  if (running_ == 0) hang_up_locked("stopped");
}

std::string WorkerLink::drop_reason() const {
  std::lock_guard lock(mu_);
  return why_;
}

void WorkerLink::set_connection(shm::UniqueFd connection) {
  std::lock_guard lock(mu_);
  connection_ = std::move(connection);
}

int WorkerLink::connection_fd() const {
  std::lock_guard lock(mu_);
  return connection_.get();
}

shm::UniqueFd WorkerLink::take_connection() {
  std::lock_guard lock(mu_);
  return std::move(connection_);
}

}  // namespace batchd

// libbatchd-client's worker side: a process that runs the model for a batchd daemon started with
// --backend workers. It attaches in the worker role, receives batches in shared memory and
// writes their outputs there; if it crashes or hangs, the daemon runs its batches elsewhere.
//
//   batchd::Error error;
//   auto worker = batchd::Worker::connect({.name = "mymodel", .version = "1.0"}, &error);
//   worker->serve([](batchd::WorkerBatch& batch) {
//     for (std::size_t i = 0; i < batch.size(); ++i) batch.append(my_model(batch.input(i)));
//   });
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "client.hpp"

namespace batchd {

struct WorkerOptions {
  std::string socket_path;       // empty: the client's default (BATCHD_SOCKET, then the daemon's)
  // The model it serves, by name (up to 31 bytes), shown in the daemon's logs and status. A
  // daemon whose default model runs in workers takes any name; one whose workers serve a named
  // model refuses other names, and any daemon refuses a model it runs in process.
  std::string name = "worker";
  std::string version = "0";
  unsigned concurrency = 1;      // batches run at once, one thread each (the daemon may grant fewer)
  std::uint32_t max_inputs = 4096;       // the largest batch this worker takes: inputs
  std::uint64_t max_bytes = 64u << 20;   // and input bytes
  std::chrono::milliseconds attach_timeout{5000};  // retry while no daemon is there, this long
  // How long a thread spins for its next batch before it sleeps: a futex wake costs tens of
  // microseconds on a VM, so a busy worker answers sooner when it spins a little.
  std::chrono::microseconds spin{50};
};

// One batch handed to the model: its inputs, and where its outputs go, in input order. The
// inputs are the daemon's shared memory: valid until the handler returns.
class WorkerBatch {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::string_view input(std::size_t i) const noexcept {
    return {input_bytes_ + input_offsets_[i], input_offsets_[i + 1] - input_offsets_[i]};
  }
  // All inputs at once: input i is input_bytes()[input_offsets()[i], input_offsets()[i + 1]);
  // input_offsets() has size() + 1 entries, the first 0.
  [[nodiscard]] std::span<const char> input_bytes() const noexcept {
    return {input_bytes_, input_offsets_[count_]};
  }
  [[nodiscard]] std::span<const std::uint32_t> input_offsets() const noexcept {
    return {input_offsets_, count_ + 1};
  }
  // Appends the next output; false when it does not fit (one output past the daemon's
  // --max-output-bytes, or the batch's outputs past its room): the batch then fails.
  bool append(std::string_view output) noexcept;
  // Room for the next output of n bytes, to write in place before the next call; nullptr when it
  // does not fit.
  char* append_in_place(std::size_t n) noexcept;
  [[nodiscard]] std::size_t outputs() const noexcept { return outputs_; }
  // Which of the worker's buffers (0 .. concurrency - 1) this batch came in on.
  [[nodiscard]] unsigned lane() const noexcept { return lane_; }

 private:
  friend class Worker;
  unsigned lane_ = 0;
  std::size_t count_ = 0;
  const char* input_bytes_ = nullptr;
  const std::uint32_t* input_offsets_ = nullptr;
  char* output_bytes_ = nullptr;
  std::uint32_t* output_offsets_ = nullptr;
  std::uint64_t output_capacity_ = 0;
  std::uint32_t max_output_bytes_ = 0;
  std::size_t outputs_ = 0;
  std::uint64_t used_ = 0;
  const char* refusal_ = nullptr;  // why an output did not fit
};

// Runs the model on one batch: one append() per input, in order. An exception fails the whole
// batch with its what() as the message (the daemon then splits the batch until the input that
// fails is alone, and its caller alone gets the error).
using WorkerHandler = std::function<void(WorkerBatch&)>;

enum class WorkerEnd {
  kStopped,     // stop() was called: the daemon was told, and the running batches were answered
  kDaemonGone,  // the daemon went away (or dropped this worker)
};

class Worker {
 public:
  // Attaches to the daemon in the worker role; nullptr with *error filled if it cannot (no daemon
  // within attach_timeout, refused: not allowed as a worker, not a workers daemon, full).
  static std::unique_ptr<Worker> connect(const WorkerOptions& options, Error* error);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves batches with `handler` on concurrency() threads until stop() or the daemon goes. A
  // stop lets the running batches finish and be answered first. Call once.
  WorkerEnd serve(const WorkerHandler& handler);
  // Any thread, and async-signal-safe (a SIGTERM handler may call it): serve() stops gracefully.
  void stop() noexcept;

  // What the daemon granted: batches at once, and the largest batch it sends.
  [[nodiscard]] unsigned concurrency() const noexcept;
  [[nodiscard]] std::uint32_t max_inputs() const noexcept;
  [[nodiscard]] std::uint64_t max_bytes() const noexcept;
  [[nodiscard]] std::uint32_t worker_id() const noexcept;

  struct Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd

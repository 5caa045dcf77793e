// The worker role on the control socket and the memory a worker shares with the daemon.
//
// A worker attaches as a client does (shm/attach_protocol.hpp) but sends a WorkerHello (flags
// kHelloWorker): who it is, how many batches it runs at once, and the largest batch it takes.
// The daemon answers with an AttachReply and two fds: a memfd it created and sealed against
// resizing, laid out as below, and the daemon's input arena: the memfd its drain loop assembles
// batches in, sealed so that nobody but the daemon's own mapping can write it (a worker maps it
// read-only). A batch in the arena reaches the worker without a copy: the submission says where
// its offsets and bytes are. A batch outside it (a rare split or re-run beyond the arena's slots)
// is copied into the buffer's own input area. The connection stays open as the lease; the one message a worker
// may send on it afterwards is a WorkerNotice saying it is stopping (the daemon then sends it no
// new batch and hangs up once the ones it runs are answered).
//
// The region holds one buffer per batch the worker runs at once. A buffer has a descriptor (two
// cache lines: the daemon's submission, the worker's answer) and its data: input offsets and bytes
// (written by the daemon), output offsets and bytes (written by the worker). Each descriptor is a
// one-entry ring each way: a buffer carries at most one batch at a time, so its sequence words say
// everything a ring's positions would, and neither side ever reads a ring index the other wrote.
// The daemon reads everything a worker writes once, bounds-checks it and copies it out before use.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/expected.hpp"
#include "shm/attach_protocol.hpp"

namespace batchd::shm {

// Hello::flags of a worker's hello (a WorkerHello, not a Hello).
inline constexpr std::uint32_t kHelloWorker = 2;

inline constexpr std::size_t kWorkerNameBytes = 32;
inline constexpr std::uint32_t kMaxWorkerBuffers = 16;  // batches one worker runs at once

struct WorkerHello {
  Hello hello;                  // magic, protocol_version, flags == kHelloWorker, reserved 0
  std::uint32_t concurrency;    // batches it runs at once: 1 .. kMaxWorkerBuffers
  std::uint32_t max_inputs;     // the largest batch it takes: inputs (>= 1)
  std::uint64_t max_bytes;      // and input bytes (>= 1)
  char name[kWorkerNameBytes];     // NUL-padded; printable ASCII is shown, the rest as '?'
  char version[kWorkerNameBytes];
};
static_assert(std::is_standard_layout_v<WorkerHello> && sizeof(WorkerHello) == 96);

inline constexpr std::uint32_t kWorkerNoticeMagic = 0x4e4b5257;  // "WRKN"
enum class WorkerNoticeKind : std::uint32_t { kStopping = 1 };
struct WorkerNotice {
  std::uint32_t magic;  // kWorkerNoticeMagic
  WorkerNoticeKind kind;
};
static_assert(sizeof(WorkerNotice) == 8);

inline constexpr std::uint32_t kWorkerRegionMagic = 0x47524b57;  // "WKRG"
inline constexpr std::uint32_t kWorkerRegionVersion = 2;

// The fds of a worker's attach reply, in order.
inline constexpr std::size_t kWorkerRegionFd = 0;
inline constexpr std::size_t kInputArenaFd = 1;
inline constexpr std::size_t kWorkerAttachFds = 2;

// Where a submission's inputs are (WorkerSubmit::source).
inline constexpr std::uint32_t kInputsInBuffer = 0;  // the buffer's input offsets and bytes
inline constexpr std::uint32_t kInputsInArena = 1;   // the input arena, at arena_offsets_at / arena_bytes_at

// Written by the daemon before it sends the fd, never after.
struct WorkerRegionHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t buffers;          // 1 .. kMaxWorkerBuffers
  std::uint32_t max_inputs;       // per batch
  std::uint64_t max_input_bytes;  // per batch
  std::uint64_t output_capacity;  // output bytes per buffer
  std::uint32_t max_output_bytes;  // per output
  std::uint32_t reserved;
  std::uint64_t descriptors_offset;  // buffers x WorkerDescriptor
  std::uint64_t buffer_offset;       // buffer b's data at buffer_offset + b x buffer_stride
  std::uint64_t buffer_stride;
  // Within a buffer's data: (max_inputs + 1) input offsets, max_input_bytes input bytes,
  // (max_inputs + 1) output offsets, output_capacity output bytes.
  std::uint64_t input_offsets_at;
  std::uint64_t input_bytes_at;
  std::uint64_t output_offsets_at;
  std::uint64_t output_bytes_at;
  std::uint64_t region_bytes;
};
static_assert(std::is_standard_layout_v<WorkerRegionHeader>);

// The daemon's half of a descriptor.
struct alignas(64) WorkerSubmit {
  std::atomic<std::uint32_t> seq;             // bumped once the batch is in the buffer
  std::atomic<std::uint32_t> worker_waiting;  // the worker's flag: it sleeps on seq
  std::uint32_t count;                        // inputs, >= 1
  std::uint32_t source;                       // kInputsInBuffer or kInputsInArena
  std::uint64_t input_bytes;
  // kInputsInArena: count + 1 offsets at arena_offsets_at, the first not necessarily 0 (a piece of
  // a larger batch), and input i's bytes at arena_bytes_at + offset i. The arena may be reused
  // under a worker the daemon has given up on: a worker copies the offsets out and checks them.
  std::uint64_t arena_offsets_at;
  std::uint64_t arena_bytes_at;
};

// The worker's half: its answer to the batch of the same seq.
inline constexpr std::int32_t kWorkerOk = 0;
inline constexpr std::int32_t kWorkerFailed = 1;  // the output bytes hold a message instead
struct alignas(64) WorkerDone {
  std::atomic<std::uint32_t> seq;             // = the submission's seq once answered
  std::atomic<std::uint32_t> daemon_waiting;  // the daemon's flag: it sleeps on seq
  std::int32_t status;                        // kWorkerOk or kWorkerFailed
  std::uint32_t count;                        // outputs written
  std::uint64_t output_bytes;
  // CLOCK_MONOTONIC when the worker saw the batch and when it answered: the model's own time, so
  // that the daemon can tell the hand-off's cost from it (a statistic only; never trusted).
  std::int64_t picked_ns;
  std::int64_t answered_ns;
};

struct WorkerDescriptor {
  WorkerSubmit submit;
  WorkerDone done;
};
static_assert(sizeof(WorkerDescriptor) == 128);

struct WorkerRegionParams {
  std::uint32_t buffers = 1;
  std::uint32_t max_inputs = 1;
  std::uint64_t max_input_bytes = 1;
  std::uint64_t output_capacity = 256;
  std::uint32_t max_output_bytes = 256;
};

// The whole layout for these parameters, or why they cannot be laid out (zero or past a limit).
Expected<WorkerRegionHeader> worker_region_layout(const WorkerRegionParams& params);
// Checks a header read from a mapped region of region_bytes (the worker's side): every offset
// and size inside the file and consistent with the layout this build makes.
Expected<void> check_worker_region(const WorkerRegionHeader& header, std::uint64_t region_bytes);

// Typed views of a mapped region; the header was made or checked before.
inline WorkerDescriptor& worker_descriptor(void* base, const WorkerRegionHeader& h, std::uint32_t b) noexcept {
  return static_cast<WorkerDescriptor*>(
      static_cast<void*>(static_cast<char*>(base) + h.descriptors_offset))[b];
}
inline char* worker_buffer(void* base, const WorkerRegionHeader& h, std::uint32_t b) noexcept {
  return static_cast<char*>(base) + h.buffer_offset + h.buffer_stride * b;
}

}  // namespace batchd::shm

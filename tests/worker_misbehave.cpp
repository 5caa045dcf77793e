// A worker process for the failure tests (test_workers.cpp): the reference model through the
// worker SDK, made slow, stuck or failing on purpose, or a raw worker that answers its first
// batch with garbage the SDK would never write. Exits 0 when the daemon goes away or drops it.
//
//   worker_misbehave SOCKET MODE [ARG]
//   ok                 answers right
//   sleep MS           answers right, MS milliseconds after each batch arrives
//   slow-unless SLOW_MS:FAST_MS FILE
//                      answers right, SLOW_MS milliseconds after each batch arrives, or FAST_MS
//                      while FILE exists: a slow worker that becomes fast again
//   hold               takes its first batch and never answers (the test kills it)
//   hang-after N       answers its first N batches right, then holds every batch it takes
//   cold SLOW_MS:FAST_MS:COLD_MS
//                      answers right, SLOW_MS milliseconds after each batch arrives for its first
//                      COLD_MS milliseconds after attaching, FAST_MS after: a cold start
//   hold-if MS FILE    answers right MS milliseconds after each batch arrives, and holds every
//                      batch that arrives while FILE exists: a worker that stalls on cue
//   fail-on PREFIX     the model throws on a batch holding an input that starts with PREFIX
//   bad-offsets, too-few, too-many, oversize, bad-status, scribble
//                      a raw worker: its first answer breaks the protocol that way
//   arena-probe N      a raw worker that tries every way to write the daemon's input arena, then
//                      answers N batches right from the arena and exits: code 3 when a write got
//                      through, 4 when a batch's inputs came copied instead of in the arena
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "backend/reference_batchstring.hpp"
#include "client_lib/attach.hpp"
#include "client_lib/worker.hpp"
#include "shm/futex.hpp"
#include "shm/memfd_region.hpp"
#include "shm/untrusted.hpp"

namespace {

using namespace batchd;

Worker* g_worker = nullptr;  // set before the handler is installed, never cleared

extern "C" void on_sigterm(int) { g_worker->stop(); }  // stop() is async-signal-safe

int serve_sdk(const std::string& socket, const std::string& mode, const std::string& arg,
              const std::string& fast_flag) {
  WorkerOptions options;
  options.socket_path = socket;
  options.name.assign("misbehave-").append(mode);
  options.version = "1";
  options.concurrency = 2;
  Error error;
  auto worker = Worker::connect(options, &error);
  if (!worker) {
    std::fprintf(stderr, "worker_misbehave: %s\n", error.message.c_str());
    return 1;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  g_worker = worker.get();
  std::signal(SIGTERM, on_sigterm);
  const auto attached = std::chrono::steady_clock::now();
  std::atomic<unsigned> batches{0};
  const auto ms_field = [&](std::size_t field) {  // of "A:B:C"
    std::size_t from = 0;
    for (std::size_t i = 0; i < field; ++i) from = arg.find(':', from) + 1;
    return std::chrono::milliseconds(std::stoi(arg.substr(from, arg.find(':', from) - from)));
  };
  worker->serve([&](WorkerBatch& batch) {
    if (mode == "hold") std::this_thread::sleep_for(std::chrono::hours(1));
    if (mode == "hang-after" && batches.fetch_add(1) >= std::stoul(arg)) std::this_thread::sleep_for(std::chrono::hours(1));
    if (mode == "cold") {
      const bool cold = std::chrono::steady_clock::now() - attached < ms_field(2);
      std::this_thread::sleep_for(ms_field(cold ? 0 : 1));
    }
    if (mode == "hold-if") {
      if (::access(fast_flag.c_str(), F_OK) == 0) std::this_thread::sleep_for(std::chrono::hours(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(arg)));
    }
    if (mode == "sleep") std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(arg)));
    if (mode == "slow-unless") {
      const bool fast = ::access(fast_flag.c_str(), F_OK) == 0;
      const std::string ms = fast ? arg.substr(arg.find(':') + 1) : arg.substr(0, arg.find(':'));
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(ms)));
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (mode == "fail-on" && batch.input(i).starts_with(arg)) throw std::runtime_error("poisoned input");
      batch.append(reference_batchstring(batch.input(i), 1));
    }
  });
  return 0;
}

// The garbage answer: `count` inputs came in on this buffer.
void write_garbage(const std::string& mode, void* base, const shm::WorkerRegionHeader& h, std::uint32_t count) {
  shm::WorkerDescriptor& d = shm::worker_descriptor(base, h, 0);
  char* data = shm::worker_buffer(base, h, 0);
  auto* offsets = reinterpret_cast<std::uint32_t*>(data + h.output_offsets_at);
  std::uint32_t outputs = count;
  std::uint64_t bytes = 64ull * count;
  for (std::uint32_t i = 0; i <= count; ++i) offsets[i] = 64 * i;
  std::int32_t status = shm::kWorkerOk;
  if (mode == "bad-offsets") offsets[count > 1 ? 1 : 0] = 0xfffffff0u;
  if (mode == "too-few") outputs = count - 1;
  if (mode == "too-many") outputs = count + 1;
  if (mode == "oversize") {
    offsets[count] = offsets[count - 1] + h.max_output_bytes + 1;
    bytes = offsets[count];
  }
  if (mode == "bad-status") status = 7;
  if (mode == "scribble") {
    std::memset(base, 0xa5, h.buffer_offset);  // the header and every descriptor
    status = static_cast<std::int32_t>(0xa5a5a5a5);
  }
  shm::store_once(d.done.status, status);
  shm::store_once(d.done.count, outputs);
  shm::store_once(d.done.output_bytes, bytes);
}

// Every way a worker might write the arena; each must be refused. Returns how many got through.
int probe_arena_writes(int fd, std::uint64_t size) {
  int through = 0;
  const auto expect_refused = [&through](const char* how, bool refused) {
    std::printf("arena %s: %s\n", how, refused ? "refused" : "WRITABLE");
    if (!refused) ++through;
  };
  void* rw = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  expect_refused("shared writable mapping", rw == MAP_FAILED);
  void* ro = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  expect_refused("mprotect to writable", ro != MAP_FAILED && ::mprotect(ro, size, PROT_READ | PROT_WRITE) != 0);
  expect_refused("madvise(MADV_REMOVE)", ro != MAP_FAILED && ::madvise(ro, size, MADV_REMOVE) != 0);
  const char byte = 'x';
  expect_refused("pwrite", ::pwrite(fd, &byte, 1, 0) < 0);
  expect_refused("fallocate punching a hole",
                 ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size)) != 0);
  expect_refused("ftruncate", ::ftruncate(fd, 0) != 0);
  expect_refused("new seals", ::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) != 0);
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const int reopened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  void* again = reopened >= 0 ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0) : MAP_FAILED;
  expect_refused("writable mapping through /proc/self/fd", again == MAP_FAILED);
  if (reopened >= 0) ::close(reopened);
  for (void* p : {rw, ro, again}) {
    if (p != MAP_FAILED) ::munmap(p, size);
  }
  return through;
}

// Answers batches on buffer 0 from the arena, as a worker that does not use the SDK would.
int serve_from_arena(const Attachment& attached, void* base, const shm::WorkerRegionHeader& h, const char* arena,
                     int batches) {
  shm::WorkerDescriptor& d = shm::worker_descriptor(base, h, 0);
  char* data = shm::worker_buffer(base, h, 0);
  auto* out_offsets = reinterpret_cast<std::uint32_t*>(data + h.output_offsets_at);
  std::uint32_t seen = 0;
  for (int served = 0; served < batches; ++served) {
    while (d.submit.seq.load(std::memory_order_acquire) == seen) {
      char byte = 0;
      if (::recv(attached.connection.get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK) == 0) return 0;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    seen = d.submit.seq.load(std::memory_order_acquire);
    if (shm::load_once(d.submit.source) != shm::kInputsInArena) {
      std::printf("batch %d: inputs copied, not in the arena\n", served);
      return 4;
    }
    const std::uint32_t count = shm::load_once(d.submit.count);
    const auto* in_offsets = reinterpret_cast<const std::uint32_t*>(arena + shm::load_once(d.submit.arena_offsets_at));
    const char* in_bytes = arena + shm::load_once(d.submit.arena_bytes_at);
    std::uint32_t used = 0;
    out_offsets[0] = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::string out =
          reference_batchstring(std::string_view(in_bytes + in_offsets[i], in_offsets[i + 1] - in_offsets[i]), 1);
      std::memcpy(data + h.output_bytes_at + used, out.data(), out.size());
      used += static_cast<std::uint32_t>(out.size());
      out_offsets[i + 1] = used;
    }
    shm::store_once(d.done.status, shm::kWorkerOk);
    shm::store_once(d.done.count, count);
    shm::store_once(d.done.output_bytes, std::uint64_t{used});
    d.done.seq.store(seen, std::memory_order_seq_cst);
    shm::futex_wake_all(d.done.seq);
  }
  std::printf("served %d batches from the arena\n", batches);
  return 0;
}

int serve_raw(const std::string& socket, const std::string& mode, const std::string& arg) {
  shm::WorkerHello hello{};
  hello.hello = {shm::kAttachMagic, shm::kProtocolVersion, shm::kHelloWorker, 0};
  hello.concurrency = 1;
  hello.max_inputs = 64;
  hello.max_bytes = 1 << 20;
  std::snprintf(hello.name, sizeof(hello.name), "raw-%s", mode.c_str());
  auto attached = attach_worker_to_daemon(socket, std::chrono::seconds(5), hello);
  if (!attached) {
    std::fprintf(stderr, "worker_misbehave: %s\n", attached.error().message.c_str());
    return 1;
  }
  const int region = attached->fds.at(0).get();
  const std::uint64_t size = shm::file_bytes(region).value();
  auto map = shm::map_fd(region, size, true).value();
  void* base = map.get_address();
  shm::WorkerRegionHeader h{};
  std::memcpy(&h, base, sizeof(h));
  if (mode == "arena-probe") {
    const int arena_fd = attached->fds.at(shm::kInputArenaFd).get();
    const std::uint64_t arena_size = shm::file_bytes(arena_fd).value();
    if (probe_arena_writes(arena_fd, arena_size) > 0) return 3;
    auto arena = shm::map_fd(arena_fd, arena_size, false).value();
    std::printf("attached\n");
    std::fflush(stdout);
    const int code = serve_from_arena(*attached, base, h, static_cast<const char*>(arena.get_address()), std::stoi(arg));
    std::fflush(stdout);
    return code;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  shm::WorkerDescriptor& d = shm::worker_descriptor(base, h, 0);
  // Poll for the first batch; the daemon's hang-up ends the wait (and the process).
  while (d.submit.seq.load(std::memory_order_acquire) == 0) {
    char byte = 0;
    if (::recv(attached->connection.get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK) == 0) return 0;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const std::uint32_t seq = d.submit.seq.load(std::memory_order_acquire);
  write_garbage(mode, base, h, shm::load_once(d.submit.count));
  shm::futex_wake_all(d.done.seq);
  d.done.seq.store(seq, std::memory_order_seq_cst);
  shm::futex_wake_all(d.done.seq);
  char byte = 0;
  (void)::recv(attached->connection.get(), &byte, 1, 0);  // until the daemon hangs up
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: worker_misbehave SOCKET MODE [ARG [FILE]]\n");
    return 2;
  }
  const std::string socket = argv[1], mode = argv[2], arg = argc > 3 ? argv[3] : "";
  const std::string fast_flag = argc > 4 ? argv[4] : "";
  if (mode == "ok" || mode == "sleep" || mode == "slow-unless" || mode == "hold" || mode == "fail-on" ||
      mode == "hang-after" || mode == "cold" || mode == "hold-if") {
    return serve_sdk(socket, mode, arg, fast_flag);
  }
  return serve_raw(socket, mode, arg);
}

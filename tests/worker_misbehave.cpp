// A worker process for the failure tests (test_workers.cpp): the reference model through the
// worker SDK, made slow, stuck or failing on purpose, or a raw worker that answers its first
// batch with garbage the SDK would never write. Exits 0 when the daemon goes away or drops it.
//
//   worker_misbehave SOCKET MODE [ARG]
//   ok                 answers right
//   sleep MS           answers right, MS milliseconds after each batch arrives
//   hold               takes its first batch and never answers (the test kills it)
//   fail-on PREFIX     the model throws on a batch holding an input that starts with PREFIX
//   bad-offsets, too-few, too-many, oversize, bad-status, scribble
//                      a raw worker: its first answer breaks the protocol that way
#include <sys/socket.h>
#include <unistd.h>

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

int serve_sdk(const std::string& socket, const std::string& mode, const std::string& arg) {
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
  worker->serve([&](WorkerBatch& batch) {
    if (mode == "hold") std::this_thread::sleep_for(std::chrono::hours(1));
    if (mode == "sleep") std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(arg)));
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

int serve_raw(const std::string& socket, const std::string& mode) {
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
    std::fprintf(stderr, "usage: worker_misbehave SOCKET MODE [ARG]\n");
    return 2;
  }
  const std::string socket = argv[1], mode = argv[2], arg = argc > 3 ? argv[3] : "";
  if (mode == "ok" || mode == "sleep" || mode == "hold" || mode == "fail-on") return serve_sdk(socket, mode, arg);
  return serve_raw(socket, mode);
}

#include "frontend/io_uring_probe.hpp"

#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

namespace batchd::http {

namespace {

constexpr unsigned kProbeBufferGroup = 7;
constexpr unsigned kProbeBuffers = 8;

// Owns the probe's ring and descriptors so every early return cleans up.
struct ProbeRing {
  io_uring ring{};
  bool ok = false;
  void* buf_ring = MAP_FAILED;
  std::size_t buf_ring_bytes = 0;
  char buffers[kProbeBuffers][64] = {};
  int fds[3] = {-1, -1, -1};

  ProbeRing() { ok = io_uring_queue_init(16, &ring, 0) == 0; }
  ~ProbeRing() {
    if (ok) io_uring_queue_exit(&ring);  // cancels whatever the probes left armed
    if (buf_ring != MAP_FAILED) ::munmap(buf_ring, buf_ring_bytes);
    for (const int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  ProbeRing(const ProbeRing&) = delete;
  ProbeRing& operator=(const ProbeRing&) = delete;

  // The first completion within a second: its result and flags, or nothing.
  bool wait(int& res, unsigned& flags) {
    io_uring_submit(&ring);
    __kernel_timespec ts{1, 0};
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) != 0) return false;
    res = cqe->res;
    flags = cqe->flags;
    io_uring_cqe_seen(&ring, cqe);
    return true;
  }
};

bool has_basic_ops(io_uring& ring) {
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) return false;
  bool all = true;
  for (const int op : {IORING_OP_ACCEPT, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_READ,
                       IORING_OP_POLL_ADD, IORING_OP_TIMEOUT, IORING_OP_ASYNC_CANCEL}) {
    all = all && io_uring_opcode_supported(probe, op) != 0;
  }
  io_uring_free_probe(probe);
  return all;
}

bool try_buffer_ring(ProbeRing& p) {
  p.buf_ring_bytes = kProbeBuffers * sizeof(io_uring_buf);
  p.buf_ring = ::mmap(nullptr, p.buf_ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p.buf_ring == MAP_FAILED) return false;
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uint64_t>(p.buf_ring);
  reg.ring_entries = kProbeBuffers;
  reg.bgid = kProbeBufferGroup;
  if (io_uring_register_buf_ring(&p.ring, &reg, 0) != 0) return false;
  auto* br = static_cast<io_uring_buf_ring*>(p.buf_ring);
  io_uring_buf_ring_init(br);
  for (unsigned i = 0; i < kProbeBuffers; ++i) {
    io_uring_buf_ring_add(br, p.buffers[i], sizeof(p.buffers[i]), static_cast<unsigned short>(i),
                          io_uring_buf_ring_mask(kProbeBuffers), static_cast<int>(i));
  }
  io_uring_buf_ring_advance(br, kProbeBuffers);
  return true;
}

bool try_multishot_accept(ProbeRing& p) {
  p.fds[0] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (p.fds[0] < 0 || ::bind(p.fds[0], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(p.fds[0], 4) != 0 || ::getsockname(p.fds[0], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return false;
  }
  io_uring_prep_multishot_accept(io_uring_get_sqe(&p.ring), p.fds[0], nullptr, nullptr, SOCK_CLOEXEC);
  p.fds[1] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p.fds[1] < 0 || ::connect(p.fds[1], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return false;
  int res = 0;
  unsigned flags = 0;
  if (!p.wait(res, flags)) return false;
  if (res >= 0) ::close(res);
  return res >= 0 && (flags & IORING_CQE_F_MORE) != 0;
}

bool try_multishot_recv(ProbeRing& p) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return false;
  p.fds[2] = pair[0];
  io_uring_sqe* sqe = io_uring_get_sqe(&p.ring);
  io_uring_prep_recv_multishot(sqe, pair[0], nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kProbeBufferGroup;
  const bool wrote = ::write(pair[1], "x", 1) == 1;
  ::close(pair[1]);
  int res = 0;
  unsigned flags = 0;
  return wrote && p.wait(res, flags) && res == 1 && (flags & IORING_CQE_F_MORE) != 0;
}

bool try_single_issuer() {
  io_uring ring{};
  io_uring_params params{};
  params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  if (io_uring_queue_init_params(4, &ring, &params) != 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

}  // namespace

std::string UringFeatures::describe() const {
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  return fmt::format("basic ops {}, buffer ring {}, multishot accept {}, multishot recv {}, single issuer {}",
                     yes(basic_ops), yes(buffer_ring), yes(multishot_accept), yes(multishot_recv),
                     yes(single_issuer));
}

UringFeatures probe_uring_features() {
  UringFeatures features;
  ProbeRing p;
  if (!p.ok) return features;
  features.basic_ops = has_basic_ops(p.ring);
  if (!features.basic_ops) return features;
  features.buffer_ring = try_buffer_ring(p);
  features.multishot_accept = try_multishot_accept(p);
  features.multishot_recv = features.buffer_ring && try_multishot_recv(p);
  features.single_issuer = try_single_issuer();
  return features;
}

}  // namespace batchd::http

#include "frontend/buffer_ring.hpp"

#include <sys/mman.h>

#include <cerrno>

namespace batchd::http {

BufferRing::~BufferRing() {
  if (ring_ != nullptr) ::munmap(ring_, ring_bytes_);
}

Expected<void> BufferRing::init(io_uring& ring, std::uint16_t group, unsigned count,
                                unsigned buffer_bytes) {
  ring_bytes_ = count * sizeof(io_uring_buf);
  void* mem = ::mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return errno_failure("mmap of the buffer ring");
  ring_ = static_cast<io_uring_buf_ring*>(mem);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uint64_t>(mem);
  reg.ring_entries = count;
  reg.bgid = group;
  // liburing's own convention: -errno.
  if (const int rc = io_uring_register_buf_ring(&ring, &reg, 0); rc != 0) {
    ::munmap(ring_, ring_bytes_);
    ring_ = nullptr;
    return errno_failure("io_uring_register_buf_ring", -rc);
  }
  count_ = count;
  buffer_bytes_ = buffer_bytes;
  group_ = group;
  buffers_ = std::make_unique<char[]>(static_cast<std::size_t>(count) * buffer_bytes);
  io_uring_buf_ring_init(ring_);
  for (unsigned id = 0; id < count; ++id) {
    io_uring_buf_ring_add(ring_, buffers_.get() + static_cast<std::size_t>(id) * buffer_bytes, buffer_bytes,
                          static_cast<unsigned short>(id), io_uring_buf_ring_mask(count), static_cast<int>(id));
  }
  io_uring_buf_ring_advance(ring_, static_cast<int>(count));
  return {};
}

void BufferRing::recycle(unsigned id) noexcept {
  io_uring_buf_ring_add(ring_, buffers_.get() + static_cast<std::size_t>(id) * buffer_bytes_, buffer_bytes_,
                        static_cast<unsigned short>(id), io_uring_buf_ring_mask(count_), 0);
  io_uring_buf_ring_advance(ring_, 1);
}

}  // namespace batchd::http

// A provided-buffer ring for multishot receive: the kernel picks a free buffer for each chunk it
// receives, and the loop hands the buffer back as soon as it has copied the bytes out, so a few
// megabytes serve any number of connections. liburing 2.3 has no io_uring_setup_buf_ring, so the
// ring's memory is mapped here and registered by hand.
#pragma once

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "base/expected.hpp"

namespace batchd::http {

class BufferRing {
 public:
  BufferRing() = default;
  // Precondition: the io_uring it was registered with has been torn down (that unregisters it).
  ~BufferRing();
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  // Maps and registers `count` (a power of two) buffers of `buffer_bytes` as group `group`.
  // Fails with the errno of the mmap or of the registration (the kernel may not have buffer
  // rings).
  Expected<void> init(io_uring& ring, std::uint16_t group, unsigned count, unsigned buffer_bytes);

  [[nodiscard]] std::uint16_t group() const noexcept { return group_; }
  // The bytes the kernel put in buffer `id`.
  [[nodiscard]] std::string_view view(unsigned id, std::size_t length) const noexcept {
    return {buffers_.get() + static_cast<std::size_t>(id) * buffer_bytes_, length};
  }
  // Gives buffer `id` back to the kernel.
  void recycle(unsigned id) noexcept;

 private:
  io_uring_buf_ring* ring_ = nullptr;  // mmap'ed, shared with the kernel
  std::size_t ring_bytes_ = 0;
  std::unique_ptr<char[]> buffers_;
  unsigned count_ = 0;
  unsigned buffer_bytes_ = 0;
  std::uint16_t group_ = 0;
};

}  // namespace batchd::http

#include "tools/stress_http_pipeline.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace batchd::stress::http {

IoStatus PipeConnection::fill() {
  for (;;) {
    const std::size_t had = in.size();
    in.resize(had + kReadChunk);
    const ssize_t n = ::recv(fd, in.data() + had, kReadChunk, 0);
    in.resize(had + static_cast<std::size_t>(n > 0 ? n : 0));
    if (n == 0) return IoStatus::kClosed;
    if (n > 0) continue;
    if (errno == EAGAIN) return IoStatus::kOk;
    if (errno != EINTR) return IoStatus::kError;
  }
}

IoStatus PipeConnection::flush() {
  while (writes_pending()) {
    const ssize_t n = ::send(fd, out.data() + out_done, out.size() - out_done, MSG_NOSIGNAL);
    if (n > 0) {
      out_done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      return IoStatus::kOk;
    } else if (n == 0 || errno != EINTR) {
      return IoStatus::kError;
    }
  }
  // Everything written: start over at the front, so the buffer's memory is reused, not grown.
  out.clear();
  out_done = 0;
  return IoStatus::kOk;
}

void PipeConnection::close_socket() noexcept {
  if (fd >= 0) ::close(fd);  // closing also drops it from the epoll set
  fd = -1;
  state = State::kClosed;
  wants_out = false;
  out.clear();
  out_done = 0;
  in.clear();
  reader.reset();
}

}  // namespace batchd::stress::http

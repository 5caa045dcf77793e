// What the event loop's three source files share: the per-connection record and the encoding of
// io_uring user_data. Not for use outside frontend/event_loop*.cpp and loop_*.cpp.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/event_loop.hpp"
#include "shm/clock.hpp"
#include "uring/user_data.hpp"

namespace batchd::http {

inline constexpr std::uint16_t kBufferGroup = 1;
inline constexpr unsigned kRingBuffers = 1024;       // provided buffers per loop (a power of two)
inline constexpr unsigned kRingBufferBytes = 4096;
inline constexpr unsigned kBasicBufferBytes = 8192;  // per connection, basic mode only
inline constexpr std::int64_t kLingerNs = 1'000'000'000;  // read-and-discard after a close, then reset
inline constexpr std::int64_t kSweepNs = 100'000'000;     // connection timeouts are checked this often
inline constexpr std::int64_t kFastTickNs = 5'000'000;    // while answers are owed: poll() expires timeouts
inline constexpr std::int64_t kSlowTickNs = 50'000'000;

// A connection's operations name it in their user_data (uring/user_data.hpp) by slot and
// generation: the id's low 32 bits are the slot, the 24 above its generation's low bits.
inline std::uint64_t pack_user_data(std::uint8_t op, std::uint32_t index, std::uint32_t generation) noexcept {
  return uring::pack(op, (std::uint64_t{generation & 0xFFFFFFU} << 32) | index);
}
inline std::uint8_t user_data_op(std::uint64_t data) noexcept { return uring::op_of<std::uint8_t>(data); }
inline std::uint32_t user_data_index(std::uint64_t data) noexcept {
  return static_cast<std::uint32_t>(uring::id_of(data));
}
inline std::uint32_t user_data_generation(std::uint64_t data) noexcept {
  return static_cast<std::uint32_t>(uring::id_of(data) >> 32) & 0xFFFFFFU;
}

struct EventLoop::Conn {
  enum class State : std::uint8_t {
    kOpen,       // serving requests
    kLingering,  // our side is shut for writing; reading and discarding until EOF or the linger time
    kClosing,    // shut down; the slot is freed when no operation is left in the ring
  };

  Conn(const ConnectionLimits& limits, const std::string& date) : http(limits, date) {}

  int fd = -1;
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // low 24 bits, as in user_data
  State state = State::kOpen;
  HttpConnection http;
  bool recv_armed = false;        // a receive (multishot or not) is in the ring
  bool recv_cancel_sent = false;  // paused: a cancel for the multishot receive is in the ring
  bool send_inflight = false;
  bool peer_eof = false;
  bool dirty = false;             // listed in dirty_
  bool trusted_proxy = false;     // the peer is in --trusted-proxy: its grant header is believed
  std::int64_t last_activity_ns = 0;
  std::int64_t send_started_ns = 0;   // when the write in the ring was posted
  std::int64_t linger_deadline_ns = 0;
  std::unique_ptr<char[]> basic_buffer;  // basic mode's receive buffer
  // Requests submitted for this connection and not yet answered: (pipeline seq, client request
  // id). Withdrawn from the daemon if the connection goes first.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> owed;
  // The same for its Open Inference Protocol inferences: (pipeline seq, the strings' fan-out).
  std::vector<std::pair<std::uint64_t, std::shared_ptr<FanOut>>> fans;

  [[nodiscard]] std::uint64_t user_data(Op op) const noexcept {
    return pack_user_data(static_cast<std::uint8_t>(op), index, generation);
  }
};

// A request answered later (a jobs store reply): its connection, which may be gone by then.
struct EventLoop::Caller {
  std::uint32_t index;
  std::uint32_t generation;
  std::uint64_t seq;
  std::int64_t started_ns;
};

// Hands the requests a connection parses to the loop, with the connection they came on.
class EventLoop::Dispatcher final : public HttpConnection::Handler {
 public:
  Dispatcher(EventLoop& loop, Conn& conn) : loop_(loop), conn_(conn) {}
  void on_request(std::uint64_t seq, Request&& request) override {
    loop_.on_request(conn_, seq, std::move(request));
  }

 private:
  EventLoop& loop_;
  Conn& conn_;
};

}  // namespace batchd::http

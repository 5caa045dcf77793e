// libFuzzer target over the daemon's reader of a client's segment (ClientSession::take): the
// fuzzer's bytes are what a hostile client writes into its own request region (header, ring
// positions and entries, slot headers). The reader must reject what is out of range without
// touching memory outside the segment, whatever is written.
#include <sys/socket.h>

#include <algorithm>

#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/client_session.hpp"

namespace {

constexpr batchd::shm::SegmentParams kParams{64, 256, 256};

struct Target {
  std::unique_ptr<batchd::ClientSession> session;
  batchd::shm::UniqueFd peer;

  Target() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) != 0) __builtin_trap();
    peer.reset(fds[1]);
    auto created = batchd::ClientSession::create(1, kParams, 0, 0, batchd::shm::WirePriority::kHigh);
    if (!created) __builtin_trap();
    session = std::move(*created);
    session->set_connection(batchd::shm::UniqueFd(fds[0]));
  }
};

// The input is a list of writes (offset: 2 bytes scaled to the region, length: 1 byte, bytes), so
// that short inputs reach every part of the region, not just its start.
void scribble(std::byte* region, std::size_t region_bytes, const std::uint8_t* data, std::size_t size) {
  std::size_t i = 0;
  while (i + 3 <= size) {
    const std::size_t offset = ((data[i] | (data[i + 1] << 8)) * region_bytes) >> 16;
    const std::size_t length = std::min<std::size_t>({std::size_t{data[i + 2]}, size - i - 3, region_bytes - offset});
    std::memcpy(region + offset, data + i + 3, length);
    i += 3 + length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A fresh session per input: the reader's private state starts clean, as for a new client.
  Target target;
  batchd::ClientSession& session = *target.session;
  const auto& view = session.view();
  auto* region = reinterpret_cast<std::byte*>(view.header());
  const std::size_t region_bytes = view.geometry().request_region_bytes;
  scribble(region, region_bytes, data, size);

  std::vector<char> copy;
  std::string why;
  for (int k = 0; k < 256; ++k) {
    batchd::TakenRequest taken;
    if (session.take(taken, why) != batchd::TakeResult::kTaken) break;
    // What take() hands out must lie inside the segment and within the limits, in a real class.
    if (taken.slot >= kParams.slot_count || taken.input_bytes > kParams.max_input_bytes ||
        taken.input < region || taken.input + taken.input_bytes > region + region_bytes ||
        static_cast<std::uint32_t>(taken.priority) >= batchd::shm::kWirePriorities) {
      __builtin_trap();
    }
    copy.assign(reinterpret_cast<const char*>(taken.input),
                reinterpret_cast<const char*>(taken.input) + taken.input_bytes);
    session.mark_in_flight(taken.slot, taken.generation);
    session.pop();
    if (k % 2 == 1) session.clear_in_flight(taken.slot);  // some complete, some stay in flight
  }
  session.publish();
  return 0;
}

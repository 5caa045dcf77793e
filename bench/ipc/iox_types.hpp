// The iceoryx reference's request and response: fixed-size, as iceoryx's typed request/response
// API wants plain data in its shared-memory chunks.
#pragma once

#include <cstdint>

#include "backend/reference_batchstring.hpp"

namespace batchd::bench {

struct IoxRequest {
  std::uint32_t length = 0;
  char bytes[1020];
};

struct IoxResponse {
  char answer[kDigestHexBytes];
};

// The service both sides open: {service, instance, event}.
// Arrays, not pointers: iceoryx's fixed strings take a literal by reference with its length.
inline constexpr char kIoxService[] = "batchd-bench";
inline constexpr char kIoxInstance[] = "ipc";
inline constexpr char kIoxEvent[] = "sha256";

}  // namespace batchd::bench

// What this kernel's io_uring can do, found out once at start by trying each feature on a
// throw-away ring (opcode probes alone cannot tell, because multishot is a flag on an old opcode).
#pragma once

#include <string>

namespace batchd::http {

struct UringFeatures {
  bool basic_ops = false;         // accept, recv, send, read, poll, timeout, cancel (5.6+)
  bool buffer_ring = false;       // registered provided-buffer rings (5.19+)
  bool multishot_accept = false;  // IORING_ACCEPT_MULTISHOT (5.19+)
  bool multishot_recv = false;    // IORING_RECV_MULTISHOT with a buffer ring (6.0+)
  bool single_issuer = false;     // IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (6.1+)

  [[nodiscard]] std::string describe() const;
};

// Never throws; a feature whose test fails is reported absent.
UringFeatures probe_uring_features();

}  // namespace batchd::http

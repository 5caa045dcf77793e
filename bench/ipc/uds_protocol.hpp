// The Unix-socket reference server's protocol: one SOCK_SEQPACKET message is one request's input
// bytes; the reply is one message holding its answer.
#pragma once

#include <cstddef>

namespace batchd::bench {

inline constexpr std::size_t kUdsMaxMessage = 64 * 1024;

}  // namespace batchd::bench

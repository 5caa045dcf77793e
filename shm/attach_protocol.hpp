// The attach handshake on the daemon's control socket (SOCK_SEQPACKET): the client sends a
// Hello (no fds: the daemon takes no descriptor from a client), the daemon answers with an
// AttachReply and, on success, the segment's fds in AttachFd order. Every refusal is an
// AttachReply too, sent after the hello is read, so the client can say why. The connection then
// stays open as the lease: either side closing it means the other has gone; a client that sends
// anything more on it is dropped.
#pragma once

#include <cstdint>
#include <type_traits>

namespace batchd::shm {

inline constexpr std::uint32_t kAttachMagic = 0x42415431;  // "BAT1"
// 2: completion events through CompletionEvents instead of a client's eventfd.
// 3: the response-cache segments (kUserCacheFd, kSharedCacheFd).
inline constexpr std::uint32_t kProtocolVersion = 3;

// Hello::flags. 0 asks to attach. kHelloDeadLetters asks instead for the daemon's recent dead
// letters (batchctl dead-letters): the reply is an AttachReply with one fd, a sealed memfd of
// JSON lines (daemon/dead_letter_log.hpp), and the connection then closes. kHelloWorker
// (shm/worker_region.hpp) attaches a worker process; kHelloModelControl (shm/model_control.hpp)
// loads or unloads a model. A daemon that predates a flag refuses it as kBadHello.
inline constexpr std::uint32_t kHelloDeadLetters = 1;

struct Hello {
  std::uint32_t magic;
  std::uint32_t protocol_version;
  std::uint32_t flags;  // 0 or kHelloDeadLetters; any other value is refused
  std::uint32_t reserved;
};

enum class AttachStatus : std::int32_t {
  kOk = 0,
  kBadHello = 1,
  kVersionMismatch = 2,
  kPermissionDenied = 3,
  kTooManyClients = 4,
  kShuttingDown = 5,
  kInternalError = 6,
  kTooManyClientsForUser = 7,  // this uid holds its maximum of attached clients
  kAttachTimeout = 8,          // no hello before the handshake's deadline, or evicted by newer ones
  kBusy = 9,                   // this uid starts handshakes faster than its rate: retry shortly
  kUnknownModel = 10,          // model control named no model this daemon declares
  kModelChanging = 11,         // model control: the model is being loaded or unloaded the other way
  kModelLoadFailed = 12,       // model control: the model's backend could not be made (the message says why)
};

// Fds that follow a successful AttachReply, in this order.
enum AttachFd : int {
  kRequestRegionFd = 0,     // read-write for the client
  kCompletionRegionFd = 1,  // sealed so that the client can only map it read-only
  kDoorbellFd = 2,          // eventfd: written when the daemon's drain loop sleeps
  kStatusPageFd = 3,        // sealed read-only: shm::DaemonStatusPage (status_page.hpp)
  // Sealed read-only: shm/cache_layout.hpp. The client's user's response cache (an empty one when
  // the daemon keeps none for it), and the one every user shares.
  kUserCacheFd = 4,
  kSharedCacheFd = 5,
  kAttachFdCount = 6,
};

struct AttachReply {
  std::uint32_t magic;
  std::uint32_t protocol_version;
  AttachStatus status;
  std::uint32_t client_id;
  char message[240];  // NUL-terminated reason when status != kOk
};

static_assert(std::is_standard_layout_v<Hello> && sizeof(Hello) == 16);
static_assert(std::is_standard_layout_v<AttachReply> && sizeof(AttachReply) == 256);

}  // namespace batchd::shm

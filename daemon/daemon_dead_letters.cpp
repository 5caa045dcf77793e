// The dead-letter query on the control socket (shm::kHelloDeadLetters, batchctl dead-letters):
// the recent records go back in a sealed memfd, so a reply of any size costs the drain loop one
// non-blocking send, and a client that never reads it loses only its answer.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <iterator>

#include "daemon/daemon.hpp"
#include "shm/memfd_region.hpp"

namespace batchd {
namespace {

// {"dead_letters":N,"dropped":M,"entries":[record,...]}: the log's JSON lines as one document.
std::string snapshot_document(const DeadLetterLog& log, std::optional<std::int64_t> uid) {
  const std::string lines = log.recent(uid);
  std::string out;
  out.reserve(lines.size() + 64);
  fmt::format_to(std::back_inserter(out), R"({{"dead_letters":{},"dropped":{},"entries":[)", log.recorded(),
                 log.dropped());
  std::size_t start = 0;
  while (start < lines.size()) {
    std::size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    if (start != 0) out.push_back(',');
    out.append(lines, start, end - start);
    start = end + 1;
  }
  out.append("]}\n");
  return out;
}

Expected<shm::UniqueFd> sealed_memfd(const std::string& text) noexcept {
  auto fd = shm::create_memfd("batchd-dead-letters", 0);
  if (!fd) return fd;
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd->get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errno_failure("write memfd", n == 0 ? ENOSPC : errno);
    done += static_cast<std::size_t>(n);
  }
  if (auto sealed = shm::seal_memfd(fd->get(), true); !sealed) return sealed.error();
  return fd;
}

}  // namespace

void Daemon::answer_dead_letters(PendingAttach& pending) {
  const PeerCredentials& peer = pending.peer;
  if (!peer_allowed(peer, config_.allowed_uids, config_.allowed_gids)) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "uid " + std::to_string(peer.uid) + " may not use this daemon");
    return;
  }
  // A record names its input by digest, which confirms a guess at it: the daemon's own user and
  // root see every record, any other user only the records of its own requests.
  std::optional<std::int64_t> only_uid;
  if (peer.uid != ::geteuid() && peer.uid != 0) only_uid = peer.uid;
  auto memfd = sealed_memfd(snapshot_document(*dead_letters_, only_uid));
  if (!memfd) {
    refuse(pending, shm::AttachStatus::kInternalError, "cannot hand over the dead letters: " + memfd.error().message);
    return;
  }
  shm::AttachReply reply{};
  reply.magic = shm::kAttachMagic;
  reply.protocol_version = shm::kProtocolVersion;
  reply.status = shm::AttachStatus::kOk;
  const int fds[] = {memfd->get()};
  // Non-blocking, as every send to a client: one that does not read loses only its answer.
  (void)shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), fds);
}

}  // namespace batchd

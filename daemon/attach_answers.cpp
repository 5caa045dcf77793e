// The hellos answered once, after which the connection ends: the dead-letter query
// (shm::kHelloDeadLetters, batchctl dead-letters) and model control (batchctl load and unload).
// The dead letters go back in a sealed memfd, so a reply of any size costs the drain loop one
// non-blocking send, and a client that never reads it loses only its answer.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include "daemon/attach_handshake.hpp"
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

void AttachHandshake::answer_dead_letters(PendingAttach& pending) {
  const PeerCredentials& peer = pending.peer;
  if (!peer_allowed(peer, p_.config.allowed_uids, p_.config.allowed_gids)) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "uid " + std::to_string(peer.uid) + " may not use this daemon");
    return;
  }
  // A record names its input by digest, which confirms a guess at it: the daemon's own user and
  // root see every record, any other user only the records of its own requests.
  std::optional<std::int64_t> only_uid;
  if (peer.uid != ::geteuid() && peer.uid != 0) only_uid = peer.uid;
  auto memfd = sealed_memfd(snapshot_document(p_.dead_letters, only_uid));
  if (!memfd) {
    refuse(pending, shm::AttachStatus::kInternalError, "cannot hand over the dead letters: " + memfd.error().message);
    return;
  }
  const shm::AttachReply reply = reply_of(shm::AttachStatus::kOk);
  const int fds[] = {memfd->get()};
  // Non-blocking, as every send to a client: one that does not read loses only its answer.
  (void)shm::send_with_fds(pending.connection.get(), std::as_bytes(std::span(&reply, 1)), fds);
}

void AttachHandshake::answer_model_control(PendingAttach& pending, const shm::ModelControlHello& hello) {
  const PeerCredentials& peer = pending.peer;
  // An operator's act, like a restart: the daemon's own user (the front-ends' units run as it)
  // or root.
  if (peer.uid != ::geteuid() && peer.uid != 0) {
    refuse(pending, shm::AttachStatus::kPermissionDenied,
           "only the daemon's user (uid " + std::to_string(::geteuid()) + ") or root may load or unload models");
    return;
  }
  if ((hello.action != shm::ModelAction::kLoad && hello.action != shm::ModelAction::kUnload) || hello.reserved != 0 ||
      std::memchr(hello.model, '\0', sizeof(hello.model)) == nullptr) {
    refuse(pending, shm::AttachStatus::kBadHello, "malformed model-control request");
    return;
  }
  const std::string name(hello.model);
  ModelPipeline* model = p_.models.named(name);
  if (model == nullptr) {
    refuse(pending, shm::AttachStatus::kUnknownModel, "no model named " + name + " is declared here");
    return;
  }
  const auto refusal = p_.changes.request(*model, hello.action == shm::ModelAction::kLoad, pending.connection, peer);
  if (refusal) refuse(pending, refusal->status, refusal->why);
}

}  // namespace batchd

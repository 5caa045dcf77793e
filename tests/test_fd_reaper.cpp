// The reaper (daemon/fd_reaper.hpp): a peer's descriptor dropped on it closes off the caller's
// thread, a socket among them without lingering, and so do the descriptors queued on a dropped
// connection. ParkedConnections hands a connection an io_uring poll still references to it only
// once that poll has completed.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <utility>

#include "daemon/fd_reaper.hpp"
#include "daemon/parked_connections.hpp"
#include "shm/clock.hpp"
#include "tests/helpers.hpp"
#include "tests/hostile_support.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

// Whether the TCP peer saw its other end reset (closed without lingering) by `within`.
bool reset_seen(int peer, std::chrono::milliseconds within) {
  return test::eventually([&] {
    char buf[4096];
    const ssize_t n = ::recv(peer, buf, sizeof(buf), MSG_DONTWAIT);
    return n < 0 && errno == ECONNRESET;
  }, within);
}

// Whether the Unix-socket peer's other end is closed (it reads end-of-file) by `within`.
bool closed_seen(int peer, std::chrono::milliseconds within) {
  return test::eventually([&] {
    char byte = 0;
    return ::recv(peer, &byte, 1, MSG_DONTWAIT) == 0;
  }, within);
}

// A connection for the daemon's end (first) and the peer's (second).
std::pair<shm::UniqueFd, shm::UniqueFd> connection_pair() {
  int fds[2] = {-1, -1};
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  return {shm::UniqueFd(fds[0]), shm::UniqueFd(fds[1])};
}

}  // namespace

TEST_CASE("a parked connection stays open until its poll completes, then closes on the reaper") {
  FdReaper reaper;
  ParkedConnections parked(reaper);
  auto [polled, polled_peer] = connection_pair();
  auto [unpolled, unpolled_peer] = connection_pair();
  constexpr std::uint64_t kPoll = 42;
  parked.release(std::move(polled), kPoll);
  parked.release(std::move(unpolled), 0);
  CHECK(closed_seen(unpolled_peer.get(), 5s));  // no poll references it: to the reaper at once
  char byte = 0;
  CHECK(::recv(polled_peer.get(), &byte, 1, MSG_DONTWAIT) == -1);  // still open: EAGAIN, not end-of-file
  CHECK(errno == EAGAIN);
  CHECK_FALSE(parked.poll_completed(kPoll + 1));  // another poll's completion releases nothing
  CHECK(::recv(polled_peer.get(), &byte, 1, MSG_DONTWAIT) == -1);
  CHECK(parked.poll_completed(kPoll));
  CHECK(closed_seen(polled_peer.get(), 5s));
  CHECK_FALSE(parked.poll_completed(kPoll));  // released once
}

TEST_CASE("parked connections are all released at the end; with descriptors refused, closed at once") {
  FdReaper reaper;
  ParkedConnections parked(reaper);
  auto [polled, polled_peer] = connection_pair();
  parked.release(std::move(polled), 7);
  parked.release_all();
  CHECK(closed_seen(polled_peer.get(), 5s));
  CHECK_FALSE(parked.poll_completed(7));

  // A kernel that refuses passed descriptors: no peer could make the close block, so it is done
  // here, even while a poll references the connection (io_uring holds its own reference).
  parked.set_close_at_once(true);
  auto [direct, direct_peer] = connection_pair();
  parked.release(std::move(direct), 9);
  char byte = 0;
  CHECK(::recv(direct_peer.get(), &byte, 1, MSG_DONTWAIT) == 0);
  CHECK_FALSE(parked.poll_completed(9));
  CHECK(reaper.pending() == 0);
}

TEST_CASE("a lingering socket dropped on the reaper closes at once, resetting, off the caller's thread") {
  FdReaper reaper;
  shm::UniqueFd peer;
  shm::UniqueFd lingering = test::lingering_tcp_socket(peer, 30);
  const std::int64_t from_ns = shm::monotonic_ns();
  reaper.drop(std::move(lingering));
  CHECK(shm::monotonic_ns() - from_ns < 100'000'000);  // the drop itself does not close
  CHECK(reset_seen(peer.get(), 5s));
  CHECK(test::eventually([&] { return reaper.pending() == 0; }, 5s));
}

TEST_CASE("descriptors queued on a connection dropped on the reaper are taken and closed without lingering") {
  FdReaper reaper;
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) == 0);
  shm::UniqueFd ours(pair[0]), theirs(pair[1]);
  std::vector<shm::UniqueFd> peers;
  for (int i = 0; i < 3; ++i) {
    shm::UniqueFd peer;
    shm::UniqueFd lingering = test::lingering_tcp_socket(peer, 30);
    const int fds[] = {lingering.get()};
    const char junk = 'x';
    REQUIRE(shm::send_with_fds(theirs.get(), std::as_bytes(std::span(&junk, 1)), fds));
    peers.push_back(std::move(peer));  // the queued message holds the socket's last reference
  }
  theirs.reset();
  reaper.drop(std::move(ours));
  for (const shm::UniqueFd& peer : peers) CHECK(reset_seen(peer.get(), 5s));
  CHECK(test::eventually([&] { return reaper.pending() == 0; }, 5s));
}

TEST_CASE("descriptors dropped while the reaper is destroyed are still closed") {
  shm::UniqueFd peer;
  {
    FdReaper reaper;
    reaper.drop(test::lingering_tcp_socket(peer, 30));
  }
  CHECK(reset_seen(peer.get(), 5s));
}

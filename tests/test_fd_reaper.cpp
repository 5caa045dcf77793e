// The reaper (daemon/fd_reaper.hpp): a peer's descriptor dropped on it closes off the caller's
// thread, a socket among them without lingering, and so do the descriptors queued on a dropped
// connection.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <chrono>

#include "daemon/fd_reaper.hpp"
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

}  // namespace

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

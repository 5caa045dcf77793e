// Passing a message and descriptors over a Unix socket (shm/fd.hpp): what arrives, and the
// errno each failure carries in its code.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "shm/fd.hpp"
#include "tests/doctest_expected.hpp"

using namespace batchd::shm;

namespace {

struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, fds) == 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};

std::span<const std::byte> bytes_of(const char* text) {
  return std::as_bytes(std::span(text, std::strlen(text)));
}

}  // namespace

TEST_CASE("a message and its fds arrive together") {
  Pair p;
  const int passed[1] = {p.a.get()};
  REQUIRE(send_with_fds(p.a.get(), bytes_of("hello"), passed));
  std::array<std::byte, 16> buffer{};
  std::vector<UniqueFd> fds;
  const auto n = recv_with_fds(p.b.get(), buffer, fds);
  REQUIRE(n);
  CHECK(*n == 5);
  REQUIRE(fds.size() == 1);
  CHECK((::fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("nothing to read, a truncated message and a closed peer are told apart") {
  Pair p;
  std::array<std::byte, 4> small{};
  std::vector<UniqueFd> fds;
  const auto empty = recv_with_fds(p.b.get(), small, fds);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == std::errc::resource_unavailable_try_again);
  CHECK(empty.error().message.find("recvmsg") != std::string::npos);

  const int passed[1] = {p.a.get()};
  REQUIRE(send_with_fds(p.a.get(), bytes_of("longer than four"), passed));
  const auto truncated = recv_with_fds(p.b.get(), small, fds);
  REQUIRE_FALSE(truncated);
  CHECK(truncated.error().code == std::errc::protocol_error);
  // Refused, and its fd handed to the caller (a daemon closes a peer's fds off its own threads).
  CHECK(fds.size() == 1);
  fds.clear();  // the caller's close: the last reference to the other end

  p.a.reset();
  const auto closed = recv_with_fds(p.b.get(), small, fds);
  REQUIRE(closed);
  CHECK(*closed == 0);
}

TEST_CASE("sending fails with the errno in its code, the same sign as receiving") {
  Pair p;
  const std::array<int, kMaxPassedFds + 1> too_many{};
  const auto refused = send_with_fds(p.a.get(), bytes_of("x"), too_many);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == std::errc::invalid_argument);
  p.b.reset();
  const auto broken = send_with_fds(p.a.get(), bytes_of("x"), {});
  REQUIRE_FALSE(broken);
  CHECK(broken.error().code == std::errc::broken_pipe);
  CHECK(broken.error().code.value() == EPIPE);
}

// Who may attach, end to end with the batchd binary: --max-clients, and other users let in by
// --allow-uid or --allow-gid (a child process switched to that user runs batchd-send).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "backend/reference_batchstring.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace std::chrono_literals;

namespace {

constexpr uid_t kOtherUser = 12345;
constexpr uid_t kThirdUser = 12346;

std::unique_ptr<Client> try_connect(const std::string& socket, Error& error) {
  ClientOptions options;
  options.socket_path = socket;
  return Client::connect(options, &error);
}

void check_served(const test::ProcessOutput& run, const std::string& input) {
  INFO("stderr: ", run.err);
  CHECK(run.exit_code() == 0);
  CHECK(run.out == reference_batchstring(input, 1) + "\n");
}

// The daemon's own user is served whatever the allow lists say.
void check_own_user_served(const std::string& socket) {
  check_served(test::run_captured({test::built_binary("BATCHD_SEND_BIN"), "--socket", socket, "mine"}, 30s),
               "mine");
}

void check_refused(const test::ProcessOutput& run, uid_t uid) {
  INFO("stdout: ", run.out, "\nstderr: ", run.err);
  CHECK(run.exit_code() == 1);
  CHECK(run.out.empty());
  // The message the client library gives kPermissionDenied, with the daemon's reason.
  CHECK(run.err.find("this user may not use the daemon") != std::string::npos);
  CHECK(run.err.find("uid " + std::to_string(uid) + " may not use this daemon") != std::string::npos);
}

}  // namespace

TEST_CASE("--max-clients N: N clients attach, the next is refused as too many, and gets in once one leaves") {
  constexpr int kMax = 3;
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "0", "--max-clients",
                                      std::to_string(kMax)});
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kMax; ++i) clients.push_back(test::connect(socket));
  Error error;
  CHECK_FALSE(try_connect(socket, error));
  CHECK(error.code == ErrorCode::kTooManyClients);
  CHECK(error.message.find(socket) != std::string::npos);
  CHECK(error.message.find("maximum of " + std::to_string(kMax) + " clients") != std::string::npos);
  // Those attached are served as before.
  for (auto& client : clients) {
    Result r = client->submit("attached", 10s);
    REQUIRE(r.ok());
    CHECK(r.output() == reference_batchstring("attached", 1));
  }

  clients.pop_back();  // its connection closes: the daemon counts it gone
  std::unique_ptr<Client> late;
  CHECK(test::eventually([&] { return (late = try_connect(socket, error)) != nullptr; }, 10s));
  REQUIRE(late);
  Result r = late->submit("came in later", 10s);
  REQUIRE(r.ok());
  CHECK(r.output() == reference_batchstring("came in later", 1));
  // Refused attempts took no place: the daemon is full again.
  CHECK_FALSE(try_connect(socket, error));
  CHECK(error.code == ErrorCode::kTooManyClients);
}

TEST_CASE("--allow-uid lets one more user attach and be served; other users stay refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "0", "--allow-uid",
                                      std::to_string(kOtherUser)});
  check_own_user_served(socket);
  if (::geteuid() != 0) {
    MESSAGE("not root: the other users' attaches are not tried (switching user needs root)");
    return;
  }
  check_served(test::send_as(socket, {kOtherUser, kOtherUser}, "from uid 12345"), "from uid 12345");
  check_refused(test::send_as(socket, {kThirdUser, kThirdUser}, "from uid 12346"), kThirdUser);
}

TEST_CASE("--allow-gid lets a group's users attach and be served; other groups stay refused") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "0", "--allow-gid",
                                      std::to_string(kOtherUser)});
  check_own_user_served(socket);
  if (::geteuid() != 0) {
    MESSAGE("not root: the other users' attaches are not tried (switching user needs root)");
    return;
  }
  check_served(test::send_as(socket, {kThirdUser, kOtherUser}, "group 12345"), "group 12345");
  check_refused(test::send_as(socket, {kThirdUser, kThirdUser}, "group 12346"), kThirdUser);
}

TEST_CASE("without --allow-uid or --allow-gid another user is refused with permission_denied") {
  const std::string socket = test::temp_socket_path();
  test::DaemonProcess daemon(socket, {"--backend", "cpu", "--max-wait-ms", "0"});
  check_own_user_served(socket);
  if (::geteuid() != 0) {
    MESSAGE("not root: the other user's attach is not tried (switching user needs root)");
    return;
  }
  check_refused(test::send_as(socket, {kOtherUser, kOtherUser}, "not allowed"), kOtherUser);
}

#include "tests/hostile_support.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "shm/attach_protocol.hpp"
#include "shm/clock.hpp"
#include "shm/fd.hpp"

namespace batchd::test {

void stop_within_bound(DaemonProcess& daemon, std::chrono::milliseconds bound) {
  const pid_t pid = daemon.pid();
  std::atomic<bool> stopped{false};
  std::thread guard([&] {
    if (!eventually([&] { return stopped.load(); }, bound)) {
      FAIL_CHECK("batchd did not stop within ", bound.count(), " ms of SIGTERM");
      ::kill(pid, SIGKILL);
    }
  });
  daemon.stop();
  stopped.store(true);
  guard.join();
}

ChildAttackers::ChildAttackers(unsigned count, std::optional<RunAs> as,
                               const std::function<void(unsigned)>& attack)
    : ChildAttackers(count, [as](unsigned) { return as; }, attack) {}

ChildAttackers::ChildAttackers(unsigned count, const std::function<std::optional<RunAs>(unsigned)>& as_of,
                               const std::function<void(unsigned)>& attack) {
  std::vector<std::optional<RunAs>> users;
  for (unsigned i = 0; i < count; ++i) users.push_back(as_of(i));
  for (unsigned i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // no assertion here: the child may take no lock another thread held
      if (users[i] && (::setgid(users[i]->gid) != 0 || ::setuid(users[i]->uid) != 0)) ::_exit(100);
      attack(i);
      ::_exit(0);
    }
    REQUIRE(pid > 0);
    pids_.push_back(pid);
  }
}

void ChildAttackers::stop() {
  for (const pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (const pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  pids_.clear();
}

UnixAddress::UnixAddress(const std::string& path) {
  static_assert(sizeof(storage) >= sizeof(sockaddr_un));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  std::memcpy(storage, &addr, sizeof(addr));
}

int UnixAddress::connect() const noexcept {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(storage), sizeof(sockaddr_un)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

shm::UniqueFd lingering_tcp_socket(shm::UniqueFd& peer, int linger_s) {
  shm::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(listener.valid());
  const int small = 4096;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));  // inherited
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  shm::UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(sock.valid());
  ::setsockopt(sock.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  REQUIRE(::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  peer.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(peer.valid());
  // Fill everything between the two ends: the peer never reads, so nothing more can leave.
  const int flags = ::fcntl(sock.get(), F_GETFL);
  ::fcntl(sock.get(), F_SETFL, flags | O_NONBLOCK);
  const std::vector<char> chunk(4096, 'x');
  while (::send(sock.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
  }
  ::fcntl(sock.get(), F_SETFL, flags);
  const linger lingering{1, linger_s};
  REQUIRE(::setsockopt(sock.get(), SOL_SOCKET, SO_LINGER, &lingering, sizeof(lingering)) == 0);
  return sock;
}

BackgroundRun::BackgroundRun(const std::vector<std::string>& argv_storage, std::optional<RunAs> as)
    : out_(::memfd_create("output", MFD_CLOEXEC)) {
  REQUIRE(out_.valid());
  std::vector<std::string> copy = argv_storage;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out = out_.get();
  const bool switch_user = as.has_value();
  const RunAs user = as.value_or(RunAs{0, 0});
  pid_ = ::fork();
  if (pid_ == 0) {  // system calls only until exec: the child may take no lock another thread held
    if (::dup2(out, STDOUT_FILENO) < 0 || ::dup2(out, STDERR_FILENO) < 0) ::_exit(126);
    if (switch_user && (::setgroups(0, nullptr) != 0 || ::setgid(user.gid) != 0 || ::setuid(user.uid) != 0)) {
      ::_exit(125);
    }
    ::execve(argv[0], argv.data(), environ);
    ::_exit(127);
  }
  REQUIRE(pid_ > 0);
}

BackgroundRun::~BackgroundRun() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

ProcessOutput BackgroundRun::wait(std::chrono::milliseconds timeout) {
  ProcessOutput result;
  const bool exited = eventually([&] { return ::waitpid(pid_, &result.status, WNOHANG) == pid_; }, timeout);
  if (!exited) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &result.status, 0);
  }
  pid_ = -1;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(out_.get(), buf, sizeof(buf), at);
    if (n <= 0) break;
    result.out.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return result;
}

void stop_lingering(int fd) {
  const linger none{1, 0};
  REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_LINGER, &none, sizeof(none)) == 0);
}

NewClientProber::NewClientProber(std::string socket, std::chrono::milliseconds period,
                                 std::chrono::milliseconds bound, std::chrono::milliseconds hello_delay) {
  thread_ = std::thread([this, socket = std::move(socket), period, bound, hello_delay] {
    while (!stop_.load()) {
      const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(bound * 3);
      const std::int64_t start_ns = shm::monotonic_ns();
      std::string failure;
      if (hello_delay.count() > 0) {
        failure = attach_slowly(socket, hello_delay, timeout);
      } else {
        ClientOptions options;
        options.socket_path = socket;
        options.connect_timeout = timeout;
        Error error;
        if (!Client::connect(options, &error)) failure = error.message;
      }
      const std::int64_t took_us = (shm::monotonic_ns() - start_ns) / 1000;
      tried_.fetch_add(1);
      if (failure.empty() && took_us <= bound.count() * 1000) in_time_.fetch_add(1);
      if (!failure.empty()) {
        const std::lock_guard lock(failure_mutex_);
        last_failure_ = failure;
      }
      if (took_us > slowest_us_.load()) slowest_us_.store(took_us);
      for (auto waited = std::chrono::milliseconds(0); waited < period && !stop_.load();
           waited += std::chrono::milliseconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
}

std::string NewClientProber::attach_slowly(const std::string& socket, std::chrono::milliseconds hello_delay,
                                           std::chrono::milliseconds timeout) {
  const UnixAddress address(socket);
  const shm::UniqueFd conn(address.connect());
  if (!conn.valid()) return std::string("connect: ") + std::strerror(errno);
  std::this_thread::sleep_for(hello_delay);
  const shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion, 0, 0};
  if (!shm::send_with_fds(conn.get(), std::as_bytes(std::span(&hello, 1)), {})) return "the hello was not sent";
  pollfd pfd{conn.get(), POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(timeout.count())) != 1) return "no attach reply";
  shm::AttachReply reply{};
  std::vector<shm::UniqueFd> fds;  // the session's: closed with the connection
  const auto n = shm::recv_with_fds(conn.get(), std::as_writable_bytes(std::span(&reply, 1)), fds);
  if (!n || *n != sizeof(reply)) return "no attach reply";
  if (reply.status != shm::AttachStatus::kOk) {
    reply.message[sizeof(reply.message) - 1] = '\0';
    return std::string("refused: ") + reply.message;
  }
  return {};
}

std::string NewClientProber::last_failure() const {
  const std::lock_guard lock(failure_mutex_);
  return last_failure_;
}

void NewClientProber::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string large_inputs_file(const std::string& socket) {
  const std::string path = std::filesystem::path(socket).parent_path() / "large-inputs.txt";
  std::ofstream file(path);
  for (int i = 0; i < 64; ++i) {
    std::string line = std::to_string(i) + "-";
    line.resize(65536, static_cast<char>('a' + i % 26));
    file << line << '\n';
  }
  file.close();
  REQUIRE(file);
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  return path;
}

}  // namespace batchd::test

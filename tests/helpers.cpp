#include "tests/helpers.hpp"

#include <doctest/doctest.h>

#include "daemon/backend_factory.hpp"

#include <grp.h>
#include <signal.h>
#include <simdjson.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

extern char** environ;

namespace batchd::test {

double scale() {
  const char* env = std::getenv("BATCHD_TEST_SCALE");
  return env != nullptr ? std::atof(env) : 1.0;
}

std::uint64_t scaled(std::uint64_t count, std::uint64_t minimum) {
  const auto n = static_cast<std::uint64_t>(static_cast<double>(count) * scale());
  return n < minimum ? minimum : n;
}

double slowdown() {
  const char* env = std::getenv("BATCHD_TEST_SLOWDOWN");
  const double factor = env != nullptr ? std::atof(env) : 1.0;
  return factor >= 1.0 ? factor : 1.0;
}

std::chrono::milliseconds grace(std::chrono::milliseconds allowance) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(allowance.count()) * slowdown()));
}

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char templ[] = "/tmp/batchd-test-XXXXXX";
    if (::mkdtemp(templ) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

bool accepts_connections(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

std::string temp_socket_path(const std::string& name) {
  static TempDir dir;
  static std::atomic<int> counter{0};
  return (dir.path / (std::to_string(counter++) + "-" + name)).string();
}

std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path = temp_socket_path(name);
  std::ofstream(path) << text;
  return path;
}

std::string random_utf8(std::mt19937_64& rng, std::size_t bytes) {
  static constexpr const char* kSamples[] = {"a", "Z", "7", " ", "é", "ß", "Ω", "€", "中", "日",
                                             "🙂", "🚀", "𝄞"};
  std::string out;
  out.reserve(bytes);
  std::uniform_int_distribution<std::size_t> pick(0, std::size(kSamples) - 1);
  while (out.size() < bytes) {
    const char* sample = kSamples[pick(rng)];
    const std::size_t len = std::strlen(sample);
    out.append(out.size() + len <= bytes ? sample : "x", out.size() + len <= bytes ? len : 1);
  }
  return out;
}

std::string daemon_binary() {
  const char* env = std::getenv("BATCHD_BIN");
  if (env == nullptr) throw std::runtime_error("BATCHD_BIN is not set (run the tests through meson)");
  return env;
}

std::string built_binary(const char* env_var) {
  const char* env = std::getenv(env_var);
  if (env == nullptr) {
    throw std::runtime_error(std::string(env_var) + " is not set (run the tests through meson)");
  }
  return env;
}

pid_t spawn(std::vector<std::string> argv_storage) {
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); rc != 0) {
    throw std::runtime_error("cannot start " + argv_storage[0] + ": " + std::strerror(rc));
  }
  return pid;
}


int run_to_exit(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  const pid_t pid = spawn(argv);
  int status = 0;
  const bool exited = eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    throw std::runtime_error(argv[0] + " did not exit in time");
  }
  return status;
}

namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer), at);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    at += n;
  }
  return text;
}

}  // namespace

int ProcessOutput::exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

ProcessOutput run_captured(const std::vector<std::string>& argv_storage, std::chrono::milliseconds timeout,
                           std::optional<RunAs> as, std::string_view stdin_text) {
  // Files, not pipes: a child that writes much cannot block on a reader that waits for its exit.
  const shm::UniqueFd in(::memfd_create("stdin", MFD_CLOEXEC));
  const shm::UniqueFd out(::memfd_create("stdout", MFD_CLOEXEC));
  const shm::UniqueFd err(::memfd_create("stderr", MFD_CLOEXEC));
  if (!in.valid() || !out.valid() || !err.valid()) throw std::runtime_error("memfd_create failed");
  if (::pwrite(in.get(), stdin_text.data(), stdin_text.size(), 0) !=
      static_cast<ssize_t>(stdin_text.size())) {
    throw std::runtime_error("cannot write the child's standard input");
  }
  std::vector<std::string> copy = argv_storage;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Everything is prepared before fork: the child of a threaded process may only make
  // async-signal-safe calls until it execs.
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    if (::dup2(in.get(), STDIN_FILENO) < 0 || ::dup2(out.get(), STDOUT_FILENO) < 0 ||
        ::dup2(err.get(), STDERR_FILENO) < 0) {
      ::_exit(126);
    }
    if (as && (::setgroups(0, nullptr) != 0 || ::setgid(as->gid) != 0 || ::setuid(as->uid) != 0)) {
      ::_exit(125);
    }
    ::execve(argv[0], argv.data(), environ);
    ::_exit(127);
  }
  ProcessOutput result;
  const bool exited =
      eventually([&] { return ::waitpid(pid, &result.status, WNOHANG) == pid; }, timeout);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &result.status, 0);
    throw std::runtime_error(argv_storage[0] + " did not exit in time");
  }
  result.out = read_all(out.get());
  result.err = read_all(err.get());
  return result;
}

namespace {

// The summary: the last line of the run's standard output.
std::string_view summary_line(const ProcessOutput& process) {
  std::string_view line = process.out;
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (const auto newline = line.rfind('\n'); newline != std::string_view::npos) {
    line.remove_prefix(newline + 1);
  }
  return line;
}

simdjson::simdjson_result<simdjson::dom::element> summary_field(simdjson::dom::parser& parser,
                                                                std::string_view line,
                                                                const std::string& key) {
  simdjson::dom::element summary;
  if (const auto error = parser.parse(line.data(), line.size()).get(summary)) return error;
  return key.starts_with('/') ? summary.at_pointer(key) : summary[key];
}

}  // namespace

double StressRun::field(const std::string& key) const {
  const std::string_view line = summary_line(process);
  simdjson::dom::parser parser;
  double value = 0;  // get_double takes integers too
  const bool found = summary_field(parser, line, key).get_double().get(value) == simdjson::SUCCESS;
  REQUIRE_MESSAGE(found, "no number '" << key << "' in the summary line: " << line
                                       << "\nstderr: " << process.err);
  return value;
}

bool StressRun::has(const std::string& key) const {
  simdjson::dom::parser parser;
  return summary_field(parser, summary_line(process), key).error() == simdjson::SUCCESS;
}

StressRun run_stress(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{built_binary("BATCHD_STRESS_BIN"), "--json", "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  return StressRun{run_captured(argv, timeout)};
}

DaemonProcess::DaemonProcess(const std::string& socket_path, const std::vector<std::string>& args) {
  std::vector<std::string> argv_storage{daemon_binary(), "--socket", socket_path, "--log-level",
                                        "warn"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  pid_ = spawn(std::move(argv_storage));
  if (!eventually([&] { return accepts_connections(socket_path); }, std::chrono::seconds(10))) {
    stop();
    throw std::runtime_error("batchd did not start listening on " + socket_path);
  }
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = ::sigabbrev_np(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (SIG" +
           (name != nullptr ? name : "?") + ")";
  }
  return "waitpid status " + std::to_string(status);
}

namespace {

void exit_on_fault(int) { ::_exit(kWriteFaulted); }

}  // namespace

int write_in_child(void* base, std::size_t offset) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    struct sigaction on_fault {};
    on_fault.sa_handler = exit_on_fault;
    ::sigaction(SIGSEGV, &on_fault, nullptr);
    ::sigaction(SIGBUS, &on_fault, nullptr);
    static_cast<volatile unsigned char*>(base)[offset] = 'X';
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return status;
}

bool faulted(int status) {
  return (WIFEXITED(status) && WEXITSTATUS(status) == kWriteFaulted) || WIFSIGNALED(status);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) stop();
}

void DaemonProcess::signal(int sig) {
  if (pid_ <= 0) return;
  signal_sent_ = sig;
  ::kill(pid_, sig);
}

int DaemonProcess::wait_exit() {
  if (pid_ <= 0) return -1;
  const pid_t pid = pid_;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    const char* name = ::sigabbrev_np(signal_sent_);
    FAIL_CHECK("batchd (pid " << pid << ") did not exit cleanly on SIG" << (name != nullptr ? name : "?")
               << ": " << describe_exit(status)
               << " (a sanitizer's report, if any, is in this test's output)");
  }
  return status;
}

int DaemonProcess::stop(int sig) {
  if (pid_ <= 0) return -1;
  signal(sig);
  return wait_exit();
}

void DaemonProcess::kill9() {
  if (pid_ <= 0) return;
  const pid_t pid = pid_;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
    FAIL_CHECK("batchd (pid " << pid << ") had exited before SIGKILL: " << describe_exit(status));
  }
}

std::unique_ptr<Client> connect(const std::string& path) {
  ClientOptions options;
  options.socket_path = path;
  Error error;
  auto client = Client::connect(options, &error);
  INFO(error.message);
  REQUIRE(client);
  return client;
}

ClassCounts taken_by_class(const Client& client, const ClassCounts& expected, std::chrono::milliseconds timeout) {
  ClassCounts seen{};
  eventually([&] { return (seen = client.daemon_status().requests_taken_by_class) == expected; }, timeout);
  return seen;
}

shm::UniqueFd raw_connect(const std::string& socket) {
  shm::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

shm::AttachStatus hello_status(int conn, std::uint32_t flags, std::span<const int> fds,
                               std::string* message) {
  const shm::Hello hello{shm::kAttachMagic, shm::kProtocolVersion, flags, 0};
  REQUIRE(shm::send_with_fds(conn, std::as_bytes(std::span(&hello, 1)), fds));
  shm::AttachReply reply{};
  std::vector<shm::UniqueFd> got;
  const auto received = shm::recv_with_fds(conn, std::as_writable_bytes(std::span(&reply, 1)), got);
  REQUIRE(received);
  REQUIRE(*received == sizeof(reply));
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (message != nullptr) *message = reply.message;
  return reply.status;
}

InProcessDaemon::InProcessDaemon(DaemonConfig config, std::unique_ptr<Backend> backend)
    : daemon_(config, backend ? std::move(backend) : make_backend(config).value()) {
  daemon_.start();
  thread_ = std::thread([this] {
    daemon_.run();
    finished_.store(true, std::memory_order_release);
  });
}

InProcessDaemon::~InProcessDaemon() { stop(); }

void InProcessDaemon::stop() {
  if (!thread_.joinable()) return;
  daemon_.request_stop();
  thread_.join();
}

std::size_t open_fds(pid_t pid) {
  const std::filesystem::directory_iterator fds("/proc/" + std::to_string(pid) + "/fd");
  return static_cast<std::size_t>(std::distance(begin(fds), end(fds)));
}

ProcessOutput batchctl(const std::vector<std::string>& args, std::optional<RunAs> as,
                       std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{built_binary("BATCHD_CTL_BIN")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_captured(argv, timeout, as);
}

ProcessOutput send_as(const std::string& socket, RunAs as, const std::string& input) {
  REQUIRE(::chmod(std::filesystem::path(socket).parent_path().c_str(), 0711) == 0);
  return run_captured({built_binary("BATCHD_SEND_BIN"), "--socket", socket, "--timeout-ms", "10000", input},
                      std::chrono::seconds(60), as);
}

}  // namespace batchd::test

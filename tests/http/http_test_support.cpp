#include "tests/http/http_test_support.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <doctest/doctest.h>
#include <simdjson.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "frontend/http_response.hpp"
#include "backend/reference_batchstring.hpp"
#include "text/json_escape.hpp"


namespace batchd::test {

namespace beast_http = boost::beast::http;

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string http_binary() {
  const char* env = std::getenv("BATCHD_HTTP_BIN");
  if (env == nullptr) throw std::runtime_error("BATCHD_HTTP_BIN is not set (run the tests through meson)");
  return env;
}

std::optional<std::uint16_t> read_port(const std::string& path) {
  std::ifstream in(path);
  unsigned port = 0;
  if (!(in >> port) || port == 0 || port > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(port);
}

FrontendProcess::FrontendProcess(const std::string& daemon_socket, const std::vector<std::string>& args,
                                 bool wait_ready_too) {
  const std::string port_file = temp_socket_path("http.port");
  std::vector<std::string> argv{http_binary(), "--socket", daemon_socket, "--listen", "127.0.0.1:0",
                                "--port-file", port_file, "--log-level", "warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = spawn(std::move(argv));
  std::optional<std::uint16_t> port;
  const bool listening = eventually(
      [&] {
        port = read_port(port_file);
        return port.has_value();
      },
      std::chrono::seconds(10));
  if (!listening) {
    stop();
    throw std::runtime_error("batchd-http did not start listening");
  }
  port_ = *port;
  if (wait_ready_too && !wait_ready(std::chrono::seconds(10))) {
    stop();
    throw std::runtime_error("batchd-http did not become ready");
  }
}

FrontendProcess::~FrontendProcess() {
  if (pid_ <= 0) return;
  // A sanitizer report (a leak at exit, say) shows up only as a bad exit status: fail on it.
  const int status = stop();
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    FAIL_CHECK("batchd-http did not exit cleanly after SIGTERM (waitpid status " << status << ")");
  }
}

bool FrontendProcess::wait_ready(std::chrono::milliseconds timeout) const {
  return eventually(
      [&] {
        try {
          HttpClient client(port_, std::chrono::seconds(2));
          auto response = client.round_trip(make_request("GET", "/readyz"));
          return response && response->status == 200;
        } catch (const std::exception&) {
          return false;
        }
      },
      timeout);
}

void FrontendProcess::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

int FrontendProcess::wait_exit(std::chrono::milliseconds timeout) {
  int status = 0;
  if (pid_ <= 0) return -1;
  if (!eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) return -1;
  pid_ = -1;
  return status;
}

int FrontendProcess::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = wait_exit(std::chrono::seconds(30));
  if (status == -1 && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }
  return status;
}

HttpClient::HttpClient(std::uint16_t port, std::chrono::milliseconds timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket failed");
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error("connect to port " + std::to_string(port) + " failed: " + why);
  }
}

HttpClient::~HttpClient() { close(); }

void HttpClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void HttpClient::reset() {
  const linger hard{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close();
}

bool HttpClient::send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::optional<HttpResponse> HttpClient::read_response(bool head) {
  beast_http::response_parser<beast_http::string_body> parser;
  parser.body_limit(64 << 20);
  parser.eager(true);
  if (head) parser.skip(true);
  for (;;) {
    if (!buffered_.empty()) {
      boost::system::error_code ec;
      const std::size_t used = parser.put(boost::asio::buffer(buffered_.data(), buffered_.size()), ec);
      buffered_.erase(0, used);
      if (ec && ec != beast_http::error::need_more) return std::nullopt;
      if (parser.is_done()) break;
    }
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0 && parser.is_header_done() && !parser.is_done()) {
        boost::system::error_code ec;
        parser.put_eof(ec);  // a body delimited by the close
        if (!ec && parser.is_done()) break;
      }
      return std::nullopt;
    }
    buffered_.append(chunk, static_cast<std::size_t>(n));
  }
  auto message = parser.release();
  HttpResponse out;
  out.status = message.result_int();
  out.keep_alive = message.keep_alive();
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  out.body = std::move(message.body());
  return out;
}

std::optional<HttpResponse> HttpClient::round_trip(std::string_view request, bool head) {
  if (!send(request)) return std::nullopt;
  return read_response(head);
}

bool HttpClient::wait_closed(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         const std::vector<std::string>& headers) {
  std::string out;
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: test\r\n");
  for (const auto& h : headers) out.append(h).append("\r\n");
  if (!body.empty() || method == "POST") out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  out.append("\r\n").append(body);
  return out;
}

std::string batch_request(std::string_view input, const std::vector<std::string>& headers) {
  std::string body = R"({"input":")";
  text::append_json_escaped(input, body);
  body.append("\"}");
  return make_request("POST", "/v1/batchstring", body, headers);
}

std::string expected_json_output(std::string_view input) {
  return R"({"output":")" + reference_batchstring(input, 1) + "\"}";
}

std::string error_code_of(const std::string& body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body).get(root) != simdjson::SUCCESS) return {};
  std::string_view code;
  if (root["error"]["code"].get_string().get(code) != simdjson::SUCCESS) return {};
  return std::string(code);
}

void check_error(const HttpResponse& r, unsigned status, const std::string& code) {
  CHECK(r.status == status);
  CHECK(r.header("content-type") == "application/json");
  CHECK(error_code_of(r.body) == code);
  CHECK(r.body.find(R"("message":")") != std::string::npos);
}

}  // namespace batchd::test

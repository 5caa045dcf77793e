#include "status/metrics_listener.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>

#include "shm/clock.hpp"

namespace batchd {

namespace {

namespace beast_http = boost::beast::http;

// One scraper's exchange: its request as far as it came, then the answer as far as it went.
struct Connection {
  shm::UniqueFd fd;
  std::int64_t deadline_ns = 0;
  std::optional<beast_http::request_parser<beast_http::empty_body>> parser;
  std::string in;    // received and not yet parsed
  std::string out;   // the answer, once decided
  std::size_t sent = 0;
  [[nodiscard]] bool answering() const noexcept { return !out.empty(); }
};

std::string response(unsigned code, std::string_view reason, std::string_view content_type,
                     std::string_view extra_headers, std::string_view body, bool head) {
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
                     code, reason, content_type, body.size(), extra_headers, head ? std::string_view() : body);
}

std::string error_response(unsigned code, std::string_view reason, std::string_view message,
                           std::string_view extra_headers = {}) {
  return response(code, reason, "text/plain; charset=utf-8", extra_headers, fmt::format("{}\n", message), false);
}

// The answer to a request whose header is complete: /metrics to GET or HEAD, errors otherwise.
std::string answer(const beast_http::request<beast_http::empty_body>& request,
                   const MetricsListener::Render& render) {
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics") return error_response(404, "Not Found", "not found: this listener serves GET /metrics");
  const bool head = request.method() == beast_http::verb::head;
  if (request.method() != beast_http::verb::get && !head) {
    return error_response(405, "Method Not Allowed", "only GET and HEAD", "Allow: GET, HEAD\r\n");
  }
  return response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", {}, render(), head);
}

// Reads what the scraper sent; decides the answer once its header is complete. False: close.
bool receive(Connection& c, const MetricsListener::Render& render) {
  char buffer[2048];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return false;  // gone before its request was whole
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.in.append(buffer, static_cast<std::size_t>(n));
    boost::system::error_code ec;
    const std::size_t used = c.parser->put(boost::asio::const_buffer(c.in.data(), c.in.size()), ec);
    c.in.erase(0, used);
    if (c.parser->is_header_done()) {
      try {
        c.out = answer(c.parser->get(), render);
      } catch (const std::exception& e) {  // out of memory: this scrape fails, not the daemon
        c.out = error_response(500, "Internal Server Error", e.what());
      }
      return true;
    }
    if (ec == beast_http::error::header_limit) {
      c.out = error_response(431, "Request Header Fields Too Large", "request header too large");
      return true;
    }
    if (ec && ec != beast_http::error::need_more) {
      c.out = error_response(400, "Bad Request", "bad request: " + ec.message());
      return true;
    }
  }
}

// Sends what the socket takes now. False: done (or failed), close.
bool send_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += static_cast<std::size_t>(n);
  }
  ::shutdown(c.fd.get(), SHUT_WR);
  return false;
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return 0;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
}

}  // namespace

MetricsListener::MetricsListener(const ListenAddress& address, Render render) : render_(std::move(render)) {
  listen_fd_.reset(::socket(address.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) throw std::system_error(errno, std::generic_category(), "--metrics-listen: socket");
  const int one = 1;
  if (::setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&address.addr), address.length) != 0 ||
      ::listen(listen_fd_.get(), 64) != 0) {
    throw std::system_error(errno, std::generic_category(), "--metrics-listen: cannot listen there");
  }
  port_ = bound_port(listen_fd_.get());
  stop_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!stop_fd_.valid()) throw std::system_error(errno, std::generic_category(), "eventfd");
}

MetricsListener::~MetricsListener() {
  if (!thread_.joinable()) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void MetricsListener::start() { thread_ = std::thread([this] { run(); }); }

void MetricsListener::run() noexcept {
  std::array<Connection, kMaxConnections> connections;
  const auto deadline_span_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(kDeadline).count();
  for (;;) {
    std::array<pollfd, kMaxConnections + 2> fds{};
    std::array<Connection*, kMaxConnections + 2> owner{};
    std::size_t n = 0;
    fds[n++] = {stop_fd_.get(), POLLIN, 0};
    fds[n++] = {listen_fd_.get(), POLLIN, 0};
    std::int64_t now_ns = shm::monotonic_ns();
    std::int64_t wake_ns = now_ns + deadline_span_ns;
    for (Connection& c : connections) {
      if (!c.fd.valid()) continue;
      if (c.deadline_ns <= now_ns) {  // a slow or silent scraper loses its connection
        c.fd.reset();
        continue;
      }
      wake_ns = std::min(wake_ns, c.deadline_ns);
      owner[n] = &c;
      fds[n++] = {c.fd.get(), static_cast<short>(c.answering() ? POLLOUT : POLLIN), 0};
    }
    const int timeout_ms = static_cast<int>((wake_ns - now_ns) / 1'000'000 + 1);
    if (::poll(fds.data(), n, timeout_ms) < 0 && errno != EINTR) {
      spdlog::error("metrics listener: poll failed ({}); it stops", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    for (std::size_t i = 2; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      Connection& c = *owner[i];
      const bool was_answering = c.answering();
      bool keep = was_answering ? send_some(c) : receive(c, render_);
      if (keep && !was_answering && c.answering()) keep = send_some(c);
      if (!keep) c.fd.reset();
    }
    if (fds[1].revents == 0) continue;
    now_ns = shm::monotonic_ns();
    for (;;) {
      shm::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd.valid()) break;
      Connection* free_slot = nullptr;
      for (Connection& c : connections) {
        if (!c.fd.valid()) free_slot = &c;
      }
      if (free_slot == nullptr) continue;  // full: this one is closed at once
      free_slot->fd = std::move(fd);
      free_slot->deadline_ns = now_ns + deadline_span_ns;
      free_slot->parser.emplace();
      free_slot->parser->header_limit(static_cast<std::uint32_t>(kMaxRequestBytes));
      free_slot->in.clear();
      free_slot->out.clear();
      free_slot->sent = 0;
    }
  }
}

}  // namespace batchd

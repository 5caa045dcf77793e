#include "text/listen_address.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

namespace batchd {

namespace {

bool parse_port(std::string_view text, std::uint16_t& port) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value > 65535) return false;
  port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace

Expected<ListenAddress> parse_listen_address(std::string_view text, std::string_view flag) {
  const auto bad = [&](std::string_view what) {
    return make_failure(std::errc::invalid_argument, fmt::format("{} in {} {}", what, flag, text));
  };
  ListenAddress out;
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return make_failure(std::errc::invalid_argument, fmt::format("{} wants ADDR:PORT, got {}", flag, text));
  }
  const std::string host(text.substr(0, colon));
  std::uint16_t port = 0;
  if (!parse_port(text.substr(colon + 1), port)) return bad("bad port");
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    if (::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6->sin6_addr) != 1) {
      return bad("bad IPv6 address");
    }
    out.length = sizeof(sockaddr_in6);
    return out;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) return bad("bad IPv4 address");
  out.length = sizeof(sockaddr_in);
  return out;
}

void write_port_file(const std::string& path, std::uint16_t port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << port << '\n';
    if (!out) throw std::runtime_error("cannot write " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + temp);
}

}  // namespace batchd

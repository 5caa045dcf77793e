#include "frontend/priority_grants.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "text/ascii.hpp"

namespace batchd::grants {

namespace {

// Priority's order is high (0) < normal < low: a smaller value is a higher class.
constexpr int rank(Priority p) noexcept { return static_cast<int>(p); }

IpAddress mapped_v4(const void* v4_bytes) noexcept {
  IpAddress out{};
  out[10] = 0xFF;
  out[11] = 0xFF;
  std::memcpy(out.data() + 12, v4_bytes, 4);
  return out;
}

}  // namespace

std::optional<IpAddress> parse_ip(std::string_view address) noexcept {
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  if (address.empty() || address.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buffer[INET6_ADDRSTRLEN] = {};  // inet_pton wants a terminated string
  std::memcpy(buffer, address.data(), address.size());
  in_addr v4{};
  if (::inet_pton(AF_INET, buffer, &v4) == 1) return mapped_v4(&v4);
  IpAddress v6{};
  if (::inet_pton(AF_INET6, buffer, v6.data()) == 1) return v6;
  return std::nullopt;
}

std::optional<IpAddress> ip_of(const sockaddr_storage& peer) noexcept {
  if (peer.ss_family == AF_INET) {
    return mapped_v4(&reinterpret_cast<const sockaddr_in&>(peer).sin_addr);
  }
  if (peer.ss_family == AF_INET6) {
    IpAddress out{};
    std::memcpy(out.data(), &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, out.size());
    return out;
  }
  return std::nullopt;
}

Expected<Cidr> Cidr::parse(std::string_view spec) {
  const std::string_view trimmed = text::trim(spec);
  const std::size_t slash = trimmed.find('/');
  const std::optional<IpAddress> address = parse_ip(trimmed.substr(0, slash));
  if (!address) return make_failure(std::errc::invalid_argument, "not an IP address or network: \"" + std::string(spec) + "\"");
  const bool v4 = trimmed.find(':') == std::string_view::npos;
  unsigned bits = v4 ? 32 : 128;
  if (slash != std::string_view::npos) {
    const std::string_view digits = trimmed.substr(slash + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), bits);
    if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() || bits > (v4 ? 32U : 128U)) {
      return make_failure(std::errc::invalid_argument, "bad prefix length in \"" + std::string(spec) + "\"");
    }
  }
  Cidr cidr;
  cidr.bits_ = v4 ? bits + 96 : bits;
  cidr.network_ = *address;
  return cidr;
}

bool Cidr::contains(const IpAddress& address) const noexcept {
  const unsigned whole = bits_ / 8;
  if (std::memcmp(address.data(), network_.data(), whole) != 0) return false;
  if (bits_ % 8 == 0) return true;
  const auto mask = static_cast<std::uint8_t>(0xFF00U >> (bits_ % 8));
  return (address[whole] & mask) == (network_[whole] & mask);
}

TokenDigest token_digest(std::string_view token) noexcept {
  TokenDigest digest{};
  ::SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

bool digest_equal(const TokenDigest& a, const TokenDigest& b) noexcept {
  return ::CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool GrantPolicy::trusts(const IpAddress& peer) const noexcept {
  return std::any_of(config_.trusted_proxies.begin(), config_.trusted_proxies.end(),
                     [&](const Cidr& cidr) { return cidr.contains(peer); });
}

std::optional<std::size_t> GrantPolicy::token_index(const TokenDigest& digest) const noexcept {
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < config_.tokens.size(); ++i) {
    // No early exit: the time taken does not say which entry (if any) matched.
    if (digest_equal(config_.tokens[i].digest, digest)) found = i;
  }
  return found;
}

Resolved GrantPolicy::resolve(const Presented& presented) const noexcept {
  Resolved out{config_.default_max, false, 0};
  if (presented.proxy_grant) {
    const std::optional<Priority> named = parse_priority(text::trim(*presented.proxy_grant));
    if (presented.from_trusted_proxy && named) {
      out.max = *named;
    } else {
      out.ignored_credential = true;
    }
  }
  if (!presented.token.empty()) {
    if (const std::optional<std::size_t> i = token_index(token_digest(presented.token))) {
      out.max = higher(out.max, config_.tokens[*i].max);
      if (config_.cache_by_credential) out.cache_scope = static_cast<std::uint32_t>(*i + 1);
    } else {
      out.ignored_credential = true;
    }
  }
  return out;
}

Priority higher(Priority a, Priority b) noexcept { return rank(a) <= rank(b) ? a : b; }

Capped cap(Priority claimed, Priority granted) noexcept {
  if (rank(claimed) >= rank(granted)) return {claimed, false};
  return {granted, true};
}

std::string_view bearer_token(std::string_view authorization) noexcept {
  const std::string_view value = text::trim(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || !text::iequals(value.substr(0, kScheme.size()), kScheme)) return {};
  if (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t') return {};
  return text::trim(value.substr(kScheme.size() + 1));
}

}  // namespace batchd::grants

// Priority over the network is the operator's grant, per caller, never the caller's claim (DESIGN.md
// decision 3, carried to remote callers). The front-ends hold the daemon's grant for everyone they
// serve, so each must decide per request which class its caller may use: by a credential the
// operator configured (a bearer token or API key), or by a trusted proxy's header. Shared by
// batchd-http and batchd-grpc; free of sockets and protocols, so unit tests drive it directly.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "client_lib/client.hpp"

namespace batchd::grants {

// An IP address in IPv6 form; an IPv4 address is held IPv4-mapped (::ffff:a.b.c.d), which is also
// what a dual-stack listener reports for an IPv4 peer, so one comparison serves both.
using IpAddress = std::array<std::uint8_t, 16>;

// "a.b.c.d" or an IPv6 address (brackets allowed), or nothing.
std::optional<IpAddress> parse_ip(std::string_view address) noexcept;
// A connected peer's address, or nothing for another family (a Unix socket).
std::optional<IpAddress> ip_of(const sockaddr_storage& peer) noexcept;

// A network, "ADDR/BITS" or a bare address (a single host).
class Cidr {
 public:
  static Expected<Cidr> parse(std::string_view spec);
  [[nodiscard]] bool contains(const IpAddress& address) const noexcept;

 private:
  IpAddress network_{};
  unsigned bits_ = 128;  // of the IPv6 form: an IPv4 /24 is 120 here
};

// SHA-256 of a token. Tokens are held and compared only as digests: a comparison then takes the
// same time whatever the token's length and wherever it differs.
using TokenDigest = std::array<std::uint8_t, 32>;
TokenDigest token_digest(std::string_view token) noexcept;
// Constant time (CRYPTO_memcmp).
bool digest_equal(const TokenDigest& a, const TokenDigest& b) noexcept;

// One credential the operator grants a class to (--priority-tokens).
struct TokenGrant {
  std::string name;  // for logs; never the token
  TokenDigest digest{};
  Priority max = Priority::kNormal;
};

struct GrantConfig {
  std::vector<TokenGrant> tokens;
  std::vector<Cidr> trusted_proxies;       // whose X-Batchd-Priority-Grant is believed
  Priority default_max = Priority::kNormal;  // a caller with no credential that grants more
  // The response cache (docs/CACHE.md): each token's callers get a cache scope of their own, so
  // one credential's cached answers are never another's (callers without one share scope 0).
  bool cache_by_credential = false;
};

// What one request presents; views into it, valid for the call.
struct Presented {
  std::string_view token;                     // a bearer token or API key; empty: none
  std::optional<std::string_view> proxy_grant;  // the grant header's value, if the header is there
  bool from_trusted_proxy = false;            // the peer's address is in trusted_proxies
};

struct Resolved {
  Priority max = Priority::kNormal;  // the highest class this caller may use
  bool ignored_credential = false;   // it presented something that granted nothing
  // Its response-cache scope (RequestOptions::cache_scope): 1 + its token's place in the token
  // file under cache_by_credential, else 0.
  std::uint32_t cache_scope = 0;
};

class GrantPolicy {
 public:
  explicit GrantPolicy(GrantConfig config = {}) : config_(std::move(config)) {}

  // Whether a request's credentials can change anything: without tokens or trusted proxies every
  // caller has the default, and the front-ends skip looking for headers.
  [[nodiscard]] bool reads_credentials() const noexcept {
    return !config_.tokens.empty() || !config_.trusted_proxies.empty();
  }
  [[nodiscard]] bool has_trusted_proxies() const noexcept { return !config_.trusted_proxies.empty(); }
  [[nodiscard]] bool trusts(const IpAddress& peer) const noexcept;
  [[nodiscard]] Priority default_max() const noexcept { return config_.default_max; }
  [[nodiscard]] const GrantConfig& config() const noexcept { return config_; }

  // The caller's grant: a trusted proxy's header replaces the default, and a known token raises
  // what that gives to the token's class. An unknown token, a grant header from a source not
  // trusted, or one naming no class grants nothing (and is reported as ignored).
  [[nodiscard]] Resolved resolve(const Presented& presented) const noexcept;

 private:
  // The place of the token with this digest; every entry is compared, found or not.
  [[nodiscard]] std::optional<std::size_t> token_index(const TokenDigest& digest) const noexcept;

  GrantConfig config_;
};

// A claim above the grant runs at the grant; low is always allowed.
struct Capped {
  Priority priority = Priority::kNormal;
  bool downgraded = false;
};
Capped cap(Priority claimed, Priority granted) noexcept;

// The higher of two classes.
Priority higher(Priority a, Priority b) noexcept;

// The token of an Authorization value "Bearer TOKEN" (scheme in any case, spaces trimmed); empty
// for another scheme or none.
std::string_view bearer_token(std::string_view authorization) noexcept;

// The headers (HTTP) and metadata keys (gRPC, lower case) the front-ends read.
inline constexpr std::string_view kApiKeyHeader = "X-API-Key";
inline constexpr std::string_view kGrantHeader = "X-Batchd-Priority-Grant";

}  // namespace batchd::grants

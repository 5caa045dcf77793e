// The grant check both front-ends share (frontend/priority_grants.hpp), alone: networks, token
// digests, the claim capped at the grant, the token file, and batchd-http's reading of headers.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

#include "frontend/grant_counters.hpp"
#include "frontend/grant_file.hpp"
#include "frontend/http_grant.hpp"
#include "frontend/priority_grants.hpp"
#include "tests/helpers.hpp"

using namespace batchd;
using namespace batchd::grants;

namespace {

constexpr Priority kHigh = Priority::kHigh;
constexpr Priority kNormal = Priority::kNormal;
constexpr Priority kLow = Priority::kLow;

IpAddress ip(std::string_view text) {
  const std::optional<IpAddress> address = parse_ip(text);
  REQUIRE(address.has_value());
  return *address;
}

Cidr cidr(std::string_view text) {
  Expected<Cidr> parsed = Cidr::parse(text);
  REQUIRE(parsed.has_value());
  return *parsed;
}

GrantPolicy policy_with(std::vector<TokenGrant> tokens, std::vector<std::string_view> proxies = {},
                        Priority default_max = kNormal) {
  GrantConfig config;
  config.tokens = std::move(tokens);
  for (const std::string_view p : proxies) config.trusted_proxies.push_back(cidr(p));
  config.default_max = default_max;
  return GrantPolicy(std::move(config));
}

TokenGrant token(std::string_view secret, Priority max) { return {std::string(secret.substr(0, 3)), token_digest(secret), max}; }

std::string write_file(const std::string& text, unsigned mode = 0600) {
  const std::string path = test::temp_socket_path("tokens.toml");
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

http::Request request_with(const std::vector<std::pair<std::string, std::string>>& headers) {
  http::Request request;
  for (const auto& [name, value] : headers) request.set(name, value);
  return request;
}

}  // namespace

TEST_CASE("a claim above the grant runs at the grant; at or below it runs as claimed; low is always allowed") {
  struct Case {
    Priority claimed, granted, runs;
    bool downgraded;
  };
  const Case cases[] = {
      {kHigh, kHigh, kHigh, false},     {kHigh, kNormal, kNormal, true}, {kHigh, kLow, kLow, true},
      {kNormal, kHigh, kNormal, false}, {kNormal, kNormal, kNormal, false}, {kNormal, kLow, kLow, true},
      {kLow, kHigh, kLow, false},       {kLow, kNormal, kLow, false},    {kLow, kLow, kLow, false},
  };
  for (const Case& c : cases) {
    CAPTURE(priority_name(c.claimed));
    CAPTURE(priority_name(c.granted));
    const Capped capped = cap(c.claimed, c.granted);
    CHECK(capped.priority == c.runs);
    CHECK(capped.downgraded == c.downgraded);
  }
  CHECK(higher(kNormal, kHigh) == kHigh);
  CHECK(higher(kLow, kNormal) == kNormal);
}

TEST_CASE("networks: IPv4 and IPv6 prefixes, bare hosts, IPv4-mapped peers; bad ones refused") {
  CHECK(cidr("10.0.0.0/8").contains(ip("10.255.1.2")));
  CHECK_FALSE(cidr("10.0.0.0/8").contains(ip("11.0.0.1")));
  CHECK(cidr("192.168.4.0/22").contains(ip("192.168.7.255")));
  CHECK_FALSE(cidr("192.168.4.0/22").contains(ip("192.168.8.0")));
  CHECK(cidr("127.0.0.1").contains(ip("127.0.0.1")));
  CHECK_FALSE(cidr("127.0.0.1").contains(ip("127.0.0.2")));
  CHECK(cidr("127.0.0.1").contains(ip("::ffff:127.0.0.1")));  // a dual-stack listener's view
  CHECK(cidr("fd00::/8").contains(ip("fd12:3456::1")));
  CHECK_FALSE(cidr("fd00::/8").contains(ip("fe80::1")));
  CHECK(cidr("[::1]").contains(ip("::1")));
  CHECK_FALSE(cidr("::1").contains(ip("127.0.0.1")));
  CHECK(cidr("0.0.0.0/0").contains(ip("8.8.8.8")));
  CHECK_FALSE(cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
  for (const std::string_view bad : {"", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/x", "host.example", "10.0.0"}) {
    CAPTURE(bad);
    CHECK_FALSE(Cidr::parse(bad).has_value());
  }
}

TEST_CASE("tokens: compared as digests; an unknown one grants nothing and is reported") {
  CHECK(digest_equal(token_digest("abc"), token_digest("abc")));
  CHECK_FALSE(digest_equal(token_digest("abc"), token_digest("abd")));
  CHECK_FALSE(digest_equal(token_digest("abc"), token_digest("abc ")));
  const GrantPolicy policy = policy_with({token("ops-secret-1234567890", kHigh), token("batch-secret-123456789", kLow)});
  CHECK(policy.reads_credentials());
  CHECK(policy.resolve({}).max == kNormal);
  CHECK_FALSE(policy.resolve({}).ignored_credential);
  CHECK(policy.resolve({"ops-secret-1234567890", {}, false}).max == kHigh);
  // A token granting less than the default does not lower the caller: the default is everyone's.
  CHECK(policy.resolve({"batch-secret-123456789", {}, false}).max == kNormal);
  const Resolved wrong = policy.resolve({"ops-secret-123456789", {}, false});
  CHECK(wrong.max == kNormal);
  CHECK(wrong.ignored_credential);
  CHECK(policy_with({token("batch-secret-123456789", kLow)}, {}, kLow).resolve({"batch-secret-123456789", {}, false}).max == kLow);
}

TEST_CASE("a proxy's grant header is believed only from a listed source, and only naming a class") {
  const GrantPolicy policy = policy_with({token("ops-secret-1234567890", kHigh)}, {"10.0.0.0/8"});
  CHECK(policy.trusts(ip("10.1.2.3")));
  CHECK_FALSE(policy.trusts(ip("127.0.0.1")));
  CHECK(policy.resolve({{}, "high", true}).max == kHigh);
  CHECK(policy.resolve({{}, " low ", true}).max == kLow);  // the proxy may lower a caller
  const Resolved untrusted = policy.resolve({{}, "high", false});
  CHECK(untrusted.max == kNormal);
  CHECK(untrusted.ignored_credential);
  const Resolved nonsense = policy.resolve({{}, "urgent", true});
  CHECK(nonsense.max == kNormal);
  CHECK(nonsense.ignored_credential);
  // A token still raises a caller the proxy lowered: both are the operator's grants.
  CHECK(policy.resolve({"ops-secret-1234567890", "low", true}).max == kHigh);
  // Nothing configured: nothing is read, everyone has the default.
  CHECK_FALSE(GrantPolicy().reads_credentials());
  CHECK(GrantPolicy().default_max() == kNormal);
}

TEST_CASE("with cache_by_credential each token is a response-cache scope of its own; otherwise every caller's is 0") {
  GrantConfig config;
  config.tokens = {token("first-token-0123456789", kNormal), token("second-token-0123456789", kHigh)};
  Presented first, second, unknown, none;
  first.token = "first-token-0123456789";
  second.token = "second-token-0123456789";
  unknown.token = "not-a-token-0123456789";
  CHECK(GrantPolicy(config).resolve(first).cache_scope == 0);
  CHECK(GrantPolicy(config).resolve(second).cache_scope == 0);
  config.cache_by_credential = true;
  const GrantPolicy policy(config);
  CHECK(policy.resolve(first).cache_scope == 1);
  CHECK(policy.resolve(second).cache_scope == 2);
  CHECK(policy.resolve(second).max == kHigh);
  CHECK(policy.resolve(unknown).cache_scope == 0);
  CHECK(policy.resolve(none).cache_scope == 0);
}

TEST_CASE("batchd-http reads Authorization: Bearer, X-API-Key and the grant header; counts what it ignores") {
  const GrantPolicy policy = policy_with({token("ops-secret-1234567890", kHigh)}, {"10.0.0.0/8"});
  GrantCounters counters;
  const auto granted = [&](const std::vector<std::pair<std::string, std::string>>& headers, bool trusted = false) {
    return http::granted_class(policy, request_with(headers), trusted, counters).max;
  };
  CHECK(granted({}) == kNormal);
  CHECK(granted({{"Authorization", "Bearer ops-secret-1234567890"}}) == kHigh);
  CHECK(granted({{"authorization", "  bearer   ops-secret-1234567890 "}}) == kHigh);
  CHECK(granted({{"X-API-Key", "ops-secret-1234567890"}}) == kHigh);
  CHECK(granted({{"Authorization", "Basic b3BzOnNlY3JldA=="}}) == kNormal);  // another scheme: no token
  CHECK(counters.snapshot().ignored_credentials == 0);
  CHECK(granted({{"Authorization", "Bearer guess"}}) == kNormal);
  CHECK(granted({{"X-Batchd-Priority-Grant", "high"}}) == kNormal);
  CHECK(counters.snapshot().ignored_credentials == 2);
  CHECK(granted({{"X-Batchd-Priority-Grant", "high"}}, true) == kHigh);
  CHECK(bearer_token("Bearer") == "");
  CHECK(bearer_token("Bearerx abc") == "");
  // Capped and counted by the pair of classes.
  CHECK(http::admit_priority(kHigh, kNormal, counters) == kNormal);
  CHECK(http::admit_priority(kHigh, kLow, counters) == kLow);
  CHECK(http::admit_priority(kNormal, kLow, counters) == kLow);
  CHECK(http::admit_priority(kLow, kNormal, counters) == kLow);
  CHECK(http::admit_priority(kHigh, kHigh, counters) == kHigh);
  const GrantCounts counts = counters.snapshot();
  CHECK(counts.downgrades == std::array<std::uint64_t, kDowngradePairs>{1, 1, 1});
  std::string text;
  render_grant_metrics(text, "batchd_http", counts);
  CHECK(text.find("batchd_http_priority_downgrades_total{claimed=\"high\",granted=\"normal\"} 1\n") != std::string::npos);
  CHECK(text.find("batchd_http_priority_credentials_ignored_total 2\n") != std::string::npos);
  CHECK(text.find("# TYPE batchd_http_priority_downgrades_total counter\n") != std::string::npos);
}

TEST_CASE("the token file: entries read, faults refused with their line, a readable file warned about") {
  const std::string good = write_file(R"([[token]]
name = "ops"
token = "ops-secret-1234567890"
max_priority = "high"

[[token]]
token = "batch-secret-123456789"
max_priority = "low"
)");
  const std::vector<TokenGrant> grants = load_token_file(good);
  REQUIRE(grants.size() == 2);
  CHECK(grants[0].name == "ops");
  CHECK(grants[0].max == kHigh);
  CHECK(digest_equal(grants[0].digest, token_digest("ops-secret-1234567890")));
  CHECK(grants[1].name == "token 2");
  CHECK(grants[1].max == kLow);
  CHECK(load_token_file(write_file("")).empty());

  const auto refused = [](const std::string& text, const std::string& says) {
    CAPTURE(text);
    try {
      (void)load_token_file(write_file(text));
      FAIL("accepted");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  refused("[[token]]\ntoken = \"x123456789\"\n", "max_priority");
  refused("[[token]]\ntoken = \"x123456789\"\nmax_priority = \"urgent\"\n", "max_priority");
  refused("[[token]]\nmax_priority = \"high\"\n", "\"token\" must be");
  refused("[[token]]\ntoken = \"two words\"\nmax_priority = \"high\"\n", "without spaces");
  refused("[[token]]\ntoken = \"x123456789\"\nmax_priority = \"high\"\nmax_prority = \"low\"\n", "unknown key");
  refused("[[token]]\ntoken = \"x123456789\"\nmax_priority = \"high\"\n[[token]]\ntoken = \"x123456789\"\n"
          "max_priority = \"low\"\n", ":4:");
  refused("tokens = 1\n", "unknown key");
  refused("[[token]\n", ":1:");

  CHECK(token_file_mode_warning("f", 0100600).empty());
  CHECK(token_file_mode_warning("f", 0100400).empty());
  CHECK(token_file_mode_warning("f", 0100640).find("0640") != std::string::npos);
  CHECK_FALSE(token_file_mode_warning("f", 0100604).empty());
}

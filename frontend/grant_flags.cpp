#include "frontend/grant_flags.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "frontend/grant_file.hpp"

namespace batchd::grants {

void add_grant_flags(CLI::App& app, GrantFlags& flags, std::string_view grant_header) {
  app.add_option("--priority-tokens", flags.tokens_file,
                 "TOML file of [[token]] tables (token, max_priority, name): a caller presenting a token "
                 "(Authorization: Bearer, or X-API-Key) may use up to its class")
      ->check(CLI::ExistingFile);
  app.add_option("--trusted-proxy", flags.trusted_proxies,
                 fmt::format("a network (ADDR[/BITS]; repeatable, or comma-separated) whose connections' {} "
                             "(high, normal or low) is believed as the caller's grant",
                             grant_header))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->delimiter(',');
  app.add_option("--default-max-priority", flags.default_max,
                 "the highest class a caller without a granting credential may use: a higher claim runs at it")
      ->capture_default_str()
      ->check(CLI::IsMember({"high", "normal", "low"}));
  app.add_flag("--cache-by-credential", flags.cache_by_credential,
               "the daemon's response cache (docs/CACHE.md) keeps each --priority-tokens token's answers apart: "
               "a caller never gets an answer cached for another credential (callers without one share theirs)");
}

GrantPolicy make_grant_policy(const GrantFlags& flags, std::string_view program) {
  GrantConfig config;
  config.default_max = parse_priority(flags.default_max).value_or(Priority::kNormal);
  config.cache_by_credential = flags.cache_by_credential;
  for (const std::string& spec : flags.trusted_proxies) {
    Expected<Cidr> cidr = Cidr::parse(spec);
    if (!cidr) throw std::runtime_error("--trusted-proxy: " + cidr.error().message);
    config.trusted_proxies.push_back(*cidr);
  }
  if (!flags.tokens_file.empty()) config.tokens = load_token_file(flags.tokens_file);
  std::vector<std::string> names;
  for (const TokenGrant& t : config.tokens) names.push_back(fmt::format("{} ({})", t.name, priority_name(t.max)));
  spdlog::info("{}: remote callers run at {} at most{}{}", program, priority_name(config.default_max),
               names.empty() ? std::string() : fmt::format("; tokens: {}", fmt::join(names, ", ")),
               flags.trusted_proxies.empty() ? std::string()
                                             : fmt::format("; grants believed from {}", fmt::join(flags.trusted_proxies, ", ")));
  if (config.default_max == Priority::kHigh) {
    spdlog::warn("{}: --default-max-priority high: every remote caller may claim high priority", program);
  }
  return GrantPolicy(std::move(config));
}

}  // namespace batchd::grants

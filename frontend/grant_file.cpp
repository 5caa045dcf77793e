#include "frontend/grant_file.hpp"

#include <sys/stat.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <stdexcept>

namespace batchd::grants {

namespace {

// Shorter tokens are accepted (a test, a migration) but said to be guessable.
constexpr std::size_t kShortToken = 16;
constexpr std::size_t kMaxToken = 4096;

[[noreturn]] void fail(const std::string& path, const toml::node& node, std::string_view what) {
  throw std::runtime_error(fmt::format("{}:{}: {}", path, node.source().begin.line, what));
}

std::string string_key(const std::string& path, const toml::table& entry, std::string_view key) {
  const toml::node* node = entry.get(key);
  if (node == nullptr) return {};
  const std::optional<std::string> value = node->value<std::string>();
  if (!value) fail(path, *node, fmt::format("\"{}\" must be a string", key));
  return *value;
}

TokenGrant read_entry(const std::string& path, const toml::table& entry, std::size_t index) {
  for (const auto& [key, node] : entry) {
    if (key != "name" && key != "token" && key != "max_priority") {
      fail(path, node, fmt::format("unknown key \"{}\" (name, token, max_priority)", key.str()));
    }
  }
  TokenGrant grant;
  grant.name = string_key(path, entry, "name");
  if (grant.name.empty()) grant.name = fmt::format("token {}", index + 1);
  const std::string token = string_key(path, entry, "token");
  if (token.empty() || token.size() > kMaxToken || token.find_first_of(" \t\r\n") != std::string::npos) {
    fail(path, entry, fmt::format("{}: \"token\" must be 1 to {} characters without spaces", grant.name, kMaxToken));
  }
  if (token.size() < kShortToken) {
    spdlog::warn("{}: {}: a token of {} characters can be guessed; use at least {}", path, grant.name, token.size(), kShortToken);
  }
  const std::optional<Priority> max = parse_priority(string_key(path, entry, "max_priority"));
  if (!max) fail(path, entry, fmt::format("{}: \"max_priority\" must be high, normal or low", grant.name));
  grant.digest = token_digest(token);
  grant.max = *max;
  return grant;
}

}  // namespace

std::string token_file_mode_warning(const std::string& path, unsigned mode) {
  if ((mode & (S_IRWXG | S_IRWXO)) == 0) return {};
  return fmt::format("{} holds secrets but its mode {:04o} lets others than its owner at it (chmod 600, or "
                     "systemd's LoadCredential=)", path, mode & 07777U);
}

std::vector<TokenGrant> load_token_file(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(fmt::format("{}:{}: {}", path, e.source().begin.line, e.description()));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (std::string warning = token_file_mode_warning(path, st.st_mode); !warning.empty()) spdlog::warn("{}", warning);
  }
  for (const auto& [key, node] : root) {
    if (key != "token") fail(path, node, fmt::format("unknown key \"{}\": the file holds [[token]] tables", key.str()));
  }
  std::vector<TokenGrant> grants;
  const toml::array* entries = root["token"].as_array();
  if (entries == nullptr) {
    if (root.contains("token")) fail(path, *root.get("token"), "\"token\" must be an array of tables ([[token]])");
    return grants;
  }
  for (const toml::node& node : *entries) {
    const toml::table* entry = node.as_table();
    if (entry == nullptr) fail(path, node, "each [[token]] must be a table");
    TokenGrant grant = read_entry(path, *entry, grants.size());
    for (const TokenGrant& earlier : grants) {
      if (digest_equal(earlier.digest, grant.digest)) fail(path, node, fmt::format("{}: the same token as {}", grant.name, earlier.name));
    }
    grants.push_back(std::move(grant));
  }
  return grants;
}

}  // namespace batchd::grants

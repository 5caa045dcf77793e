#include "grpc_frontend/call_grant.hpp"

#include "text/ascii.hpp"

namespace batchd::grpcfront {

namespace {

// The last value of a metadata key (lower case, as gRPC delivers keys); empty when absent.
std::optional<std::string_view> metadata(const grpc::CallbackServerContext& call, std::string_view key) {
  const auto& all = call.client_metadata();
  const auto it = all.find(grpc::string_ref(key.data(), key.size()));
  if (it == all.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

}  // namespace

std::optional<grants::IpAddress> peer_ip(std::string_view peer) {
  std::string_view host;
  if (peer.starts_with("ipv4:")) {
    host = peer.substr(5, peer.rfind(':') - 5);
  } else if (peer.starts_with("ipv6:")) {
    std::string_view rest = peer.substr(5);
    if (rest.starts_with("%5B") || rest.starts_with("%5b")) rest = rest.substr(3);
    if (rest.starts_with("[")) rest = rest.substr(1);
    const std::size_t close = std::min(rest.find(']'), rest.find('%'));
    if (close == std::string_view::npos) return std::nullopt;
    host = rest.substr(0, close);
  } else {
    return std::nullopt;
  }
  return grants::parse_ip(host);
}

grants::Presented presented_by(const grpc::CallbackServerContext& call, const grants::GrantPolicy& policy) {
  grants::Presented presented;
  presented.token = grants::bearer_token(metadata(call, "authorization").value_or(""));
  if (presented.token.empty()) presented.token = text::trim(metadata(call, "x-api-key").value_or(""));
  presented.proxy_grant = metadata(call, "x-batchd-priority-grant");
  if (presented.proxy_grant && policy.has_trusted_proxies()) {
    const std::optional<grants::IpAddress> address = peer_ip(call.peer());
    presented.from_trusted_proxy = address && policy.trusts(*address);
  }
  return presented;
}

grants::Resolved granted_class(const grants::GrantPolicy& policy, const grpc::CallbackServerContext& call,
                               grants::GrantCounters& counters) {
  // Nothing configured: no lookups.
  if (!policy.reads_credentials()) return grants::Resolved{policy.default_max(), false, 0};
  const grants::Resolved resolved = policy.resolve(presented_by(call, policy));
  if (resolved.ignored_credential) counters.ignored_credential();
  return resolved;
}

}  // namespace batchd::grpcfront

#include "frontend/http_grant.hpp"

#include "text/ascii.hpp"

namespace batchd::http {

namespace {

std::string_view header(const Request& request, std::string_view name) {
  const auto it = request.find(boost::beast::string_view(name.data(), name.size()));
  return it == request.end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
}

}  // namespace

grants::Resolved granted_class(const grants::GrantPolicy& policy, const Request& request, bool from_trusted_proxy,
                               grants::GrantCounters& counters) {
  // The common deployment configures nothing: no header is looked at.
  if (!policy.reads_credentials()) return grants::Resolved{policy.default_max(), false, 0};
  grants::Presented presented;
  presented.from_trusted_proxy = from_trusted_proxy;
  presented.token = grants::bearer_token(header(request, "Authorization"));
  if (presented.token.empty()) presented.token = text::trim(header(request, grants::kApiKeyHeader));
  const auto grant = request.find(boost::beast::string_view(grants::kGrantHeader.data(), grants::kGrantHeader.size()));
  if (grant != request.end()) presented.proxy_grant = std::string_view(grant->value().data(), grant->value().size());
  const grants::Resolved resolved = policy.resolve(presented);
  if (resolved.ignored_credential) counters.ignored_credential();
  return resolved;
}

Priority admit_priority(Priority claimed, Priority granted, grants::GrantCounters& counters) noexcept {
  const grants::Capped capped = grants::cap(claimed, granted);
  if (capped.downgraded) counters.downgraded(claimed, capped.priority);
  return capped.priority;
}

}  // namespace batchd::http

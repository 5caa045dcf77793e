// A request's grant, as batchd-http reads it: the credential headers (Authorization: Bearer,
// X-API-Key, and X-Batchd-Priority-Grant from a trusted proxy) resolved by the operator's policy.
#pragma once

#include "frontend/grant_counters.hpp"
#include "frontend/http_api.hpp"
#include "frontend/priority_grants.hpp"

namespace batchd::http {

// The highest class this request's caller may use and its response-cache scope; counts a
// credential that granted nothing. `from_trusted_proxy`: the connection's peer is in --trusted-proxy.
grants::Resolved granted_class(const grants::GrantPolicy& policy, const Request& request, bool from_trusted_proxy,
                       grants::GrantCounters& counters);

// `claimed` capped at `granted`; a downgrade is counted.
Priority admit_priority(Priority claimed, Priority granted, grants::GrantCounters& counters) noexcept;

}  // namespace batchd::http

// A call's grant, as batchd-grpc reads it: the credential in its metadata (authorization: Bearer,
// x-api-key, and x-batchd-priority-grant from a trusted proxy's address) resolved by the
// operator's policy (frontend/priority_grants.hpp), as batchd-http reads the same from headers.
#pragma once

#include <grpcpp/server_context.h>

#include <optional>
#include <string_view>

#include "frontend/grant_counters.hpp"
#include "frontend/priority_grants.hpp"

namespace batchd::grpcfront {

// The address in a gRPC peer string ("ipv4:10.0.0.1:5000", "ipv6:[::1]:5000", with the brackets
// percent-encoded by some gRPC versions), or nothing (a Unix socket, anything else).
std::optional<grants::IpAddress> peer_ip(std::string_view peer);

// What the call's metadata presents; views into the call, valid while it is.
grants::Presented presented_by(const grpc::CallbackServerContext& call, const grants::GrantPolicy& policy);

// The highest class this call's caller may use and its response-cache scope; counts a credential
// that granted nothing.
grants::Resolved granted_class(const grants::GrantPolicy& policy, const grpc::CallbackServerContext& call,
                       grants::GrantCounters& counters);

}  // namespace batchd::grpcfront

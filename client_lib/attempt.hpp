// How a step inside the client library that can fail says so: its value, or the client's own
// Error (client.hpp), ready to hand to whoever called the public API.
#pragma once

#include <boost/system/result.hpp>

#include "client_lib/client.hpp"

namespace batchd::client_detail {

template <class T = void>
using Attempt = boost::system::result<T, Error>;

}  // namespace batchd::client_detail

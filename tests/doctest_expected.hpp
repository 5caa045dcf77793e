// How a failed check prints an Expected (base/) or a client Attempt (client_lib/): "a value", or
// the failure's message. Boost's own operator<< would also print the value, which most types
// held here (a Geometry, an Attachment) cannot do. Include before the first check on one.
#pragma once

#include <doctest/doctest.h>

#include <boost/system/result.hpp>

#include <string>

namespace doctest {

template <class T, class E>
struct StringMaker<boost::system::result<T, E>> {
  static String convert(const boost::system::result<T, E>& result) {
    if (result) return "a value";
    return ("failed: " + result.error().message).c_str();
  }
};

}  // namespace doctest

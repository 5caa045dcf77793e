// Errors as values, returned by every layer below the daemon's start-up (README.md, "Errors").
#pragma once

#include <boost/system/result.hpp>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace batchd {

// What went wrong, for the caller to act on (code) and for a person to read (message).
struct Failure {
  std::error_code code;
  std::string message;
};

template <class T = void>
using Expected = boost::system::result<T, Failure>;

// A failure with `message`. Taking the string by value leaves any allocation to the caller.
inline Failure make_failure(std::errc code, std::string message) noexcept {
  return {std::make_error_code(code), std::move(message)};
}

// "context: <strerror(err)>", err as the code. Never throws: when the message cannot be made it
// stays empty, and the code still says what happened.
inline Failure errno_failure(std::string_view context, int err = errno) noexcept {
  Failure failure{std::error_code(err, std::generic_category()), {}};
  try {
    failure.message.append(context).append(": ").append(failure.code.message());
  } catch (...) {
    failure.message.clear();
  }
  return failure;
}

// What Expected::value() throws: a std::system_error whose what() is the message alone.
class FailureError : public std::system_error {
 public:
  explicit FailureError(const Failure& failure)
      : std::system_error(failure.code),
        text_(failure.message.empty() ? failure.code.message() : failure.message) {}
  [[nodiscard]] const char* what() const noexcept override { return text_.what(); }

 private:
  std::runtime_error text_;  // copying it cannot throw, as an exception's copy must not
};

// Found by argument-dependent lookup from boost::system::result<T, Failure>::value().
[[noreturn]] inline void throw_exception_from_error(const Failure& failure,
                                                    const boost::source_location&) {
  throw FailureError(failure);
}

}  // namespace batchd

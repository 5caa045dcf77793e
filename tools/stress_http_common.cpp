// What the HTTP closed and open loops share: the client-side deadline and counting a response.
#include "tools/stress_http_loops.hpp"

namespace batchd::stress {

namespace {
// Time for the server's own 504 to reach us when it times out no later than we do.
constexpr std::chrono::milliseconds kServerGrace{1000};
}  // namespace

std::chrono::nanoseconds http_client_deadline(const Options& options) {
  if (options.http_timeout < options.timeout) return options.timeout;
  return options.timeout + kServerGrace;
}

void record_response(Recorder& recorder, http::BodyDecoder& decoder, int status,
                     std::string_view body, std::string_view input, std::int64_t latency_ns) {
  const http::Outcome outcome = decoder.decode(status, body);
  if (outcome.answered) {
    recorder.answered(input, outcome.output, latency_ns);
  } else {
    recorder.failed_kind(outcome.error_kind);
  }
}

}  // namespace batchd::stress

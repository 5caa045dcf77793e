#include "tools/stress_http_transport.hpp"

#include <unistd.h>

#include <deque>
#include <string>
#include <utility>

#include "tools/stress_clock.hpp"
#include "tools/stress_http_proto.hpp"
#include "tools/stress_http_response.hpp"

namespace batchd::stress {

namespace {

// Time for the server's own 504 to reach us when it times out no later than we do.
constexpr std::chrono::milliseconds kServerGrace{1000};

class HttpCaller final : public Caller {
 public:
  // Takes over fds, open connections to target.endpoint.
  HttpCaller(const HttpTarget& target, const std::vector<int>& fds)
      : encoder_(target.url, target.options.http_timeout, target.options.http_api),
        decoder_(target.options.http_api),
        deadline_ns_(http_client_deadline(target.options).count()) {
    for (const int fd : fds) connections_.emplace_back(target.endpoint, fd);
  }

  // The model is always the default one (the options refuse --model over HTTP).
  Outcome call(std::string_view input, const RequestOptions& options) override {
    request_.clear();
    encoder_.append(request_, input, options.priority);
    // The connections take turns, so each carries its share of the load.
    http::SyncConnection& connection = connections_[turn_++ % connections_.size()];
    const http::Exchange ex = connection.exchange(request_, now_ns() + deadline_ns_);
    if (!ex.responded) return Outcome{false, {}, ex.error_kind};
    return decoder_.decode(ex.status, ex.body);  // valid until the next decode: the next call
  }

 private:
  std::deque<http::SyncConnection> connections_;  // a deque: they cannot move
  http::RequestEncoder encoder_;
  http::BodyDecoder decoder_;
  std::int64_t deadline_ns_;
  std::string request_;
  std::size_t turn_ = 0;
};

class HttpTransport final : public Transport {
 public:
  HttpTransport(const HttpTarget& target, std::vector<int> fds) : target_(target), shares_(std::move(fds)) {}

  std::unique_ptr<Caller> make_caller(unsigned thread) override {
    return std::make_unique<HttpCaller>(target_, shares_.deal(thread, target_.options.threads));
  }
  [[nodiscard]] unsigned lane_count() const noexcept override { return target_.options.io_threads; }
  // A lane's connections are its thread's alone: epoll, buffers and FIFOs without locks.
  [[nodiscard]] bool submit_while_pumping() const noexcept override { return false; }
  std::unique_ptr<OpenLane> make_lane(unsigned lane) override {
    return make_http_lane(target_, shares_.deal(lane, lane_count()));
  }

 private:
  HttpTarget target_;
  ConnectionShares shares_;
};

}  // namespace

ConnectionShares::~ConnectionShares() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);  // dealt to no caller or lane
  }
}

std::vector<int> ConnectionShares::deal(unsigned index, unsigned stride) {
  std::vector<int> share;
  for (std::size_t i = index; i < fds_.size(); i += stride) share.push_back(std::exchange(fds_[i], -1));
  return share;
}

std::chrono::nanoseconds http_client_deadline(const Options& options) {
  if (options.http_timeout < options.timeout) return options.timeout;
  return options.timeout + kServerGrace;
}

std::unique_ptr<Transport> make_http_transport(const HttpTarget& target, std::vector<int> fds) {
  return std::make_unique<HttpTransport>(target, std::move(fds));
}

}  // namespace batchd::stress

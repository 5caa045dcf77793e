// Several inputs sent as one submission and answered once: what a front-end needs for a tensor
// of N strings (an Open Inference Protocol request), which becomes N requests to the daemon,
// batched there with everyone else's, and one answer in input order. The first failure answers
// for all of them and withdraws the rest. Thread-safe: submitted from any thread, answered on the
// thread that polls the client.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "client_lib/client.hpp"

namespace batchd {

class FanOut : public std::enable_shared_from_this<FanOut> {
 public:
  // Either every input's output (results[i] answers inputs[i], each ok()) or the first error.
  struct Outcome {
    std::vector<Result> results;
    std::optional<Error> error;
  };
  using Done = std::function<void(Outcome&&)>;

  // Sends `inputs` through `client`. `done` is called exactly once: on this thread before start
  // returns when an input is refused at once (the admitted ones are withdrawn) or there are no
  // inputs, else from client.poll(). The FanOut lives until its last request's callback.
  static std::shared_ptr<FanOut> start(Client& client, std::span<const std::string_view> inputs,
                                       std::chrono::milliseconds timeout, Priority priority, Done done);

  // The caller no longer wants the answer (it hung up or cancelled): the requests the daemon has
  // not taken are withdrawn, and `done` comes with the cancellation (or whatever came first).
  void cancel();

  // Whether `done` has been called (or is being called).
  [[nodiscard]] bool answered();

  explicit FanOut(Client& client) : client_(client) {}

 private:
  void on_answer(std::size_t index, Result&& result);
  // Withdraws `ids` and calls `done` with `error`; neither under mu_ (the client's poll holds its
  // own lock while calling on_answer, and `done` may take the caller's locks).
  void fail(std::vector<std::uint64_t> ids, Done done, Error error);

  Client& client_;
  std::mutex mu_;
  std::vector<std::optional<Result>> results_;  // guarded by mu_
  std::vector<std::uint64_t> ids_;              // guarded by mu_: the admitted requests
  std::size_t unanswered_ = 0;                  // guarded by mu_: results still to come
  Done done_;                                   // guarded by mu_: empty once called
  std::shared_ptr<FanOut> self_;                // guarded by mu_: kept until the last callback
};

}  // namespace batchd

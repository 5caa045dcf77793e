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

  // Sends `inputs` through `client`, all or none (Client::submit_all_async). `done` is called
  // exactly once: on this thread before start returns when the inputs are refused at once (then
  // none was sent) or there are none, else from client.poll(). The FanOut lives until its last
  // request's callback.
  static std::shared_ptr<FanOut> start(Client& client, std::span<const std::string_view> inputs,
                                       std::chrono::milliseconds timeout, const RequestOptions& options, Done done);
  // To the default model.
  static std::shared_ptr<FanOut> start(Client& client, std::span<const std::string_view> inputs,
                                       std::chrono::milliseconds timeout, Priority priority, Done done) {
    return start(client, inputs, timeout, RequestOptions{priority, {}}, std::move(done));
  }

  // The caller no longer wants the answer (it hung up or cancelled): the requests the daemon has
  // not taken are withdrawn, and `done` comes with the cancellation (or whatever came first).
  void cancel();

  // Whether `done` has been called (or is being called).
  [[nodiscard]] bool answered();

 private:
  // Only start() makes one, so every FanOut has been started; the key lets std::make_shared call
  // the constructor, which has to be public for it.
  struct Passkey {
    explicit Passkey() = default;
  };

 public:
  FanOut(Passkey, Client& client) : client_(client) {}

 private:
  // Readies the state the callbacks use, before any can run, and returns the submissions.
  std::vector<Client::AsyncSubmission> prepare(std::span<const std::string_view> inputs,
                                               const RequestOptions& options, Done done);
  // After admission: records the ids, and withdraws the rest if a failure came before they were known.
  void admitted(std::span<const Client::AsyncSubmission> submissions);
  // After a refusal (no callback will come): answers with `error`.
  void refused(Error error);
  void on_answer(std::size_t index, Result&& result);
  // The admitted requests not answered yet, in id order (the order Client::cancel takes fastest).
  [[nodiscard]] std::vector<std::uint64_t> unanswered_ids_locked() const;

  Client& client_;
  std::mutex mu_;
  // Guarded by mu_: every answer that has come, failed ones too, so the unanswered are known.
  std::vector<std::optional<Result>> results_;
  std::vector<std::uint64_t> ids_;              // guarded by mu_: the admitted requests, once known
  std::size_t unanswered_ = 0;                  // guarded by mu_: results still to come
  // Guarded by mu_: a failure answered before ids_ was known, so admitted() withdraws the rest.
  bool failed_ = false;
  Done done_;                                   // guarded by mu_: empty once called
  std::shared_ptr<FanOut> self_;                // guarded by mu_: kept until the last callback
};

}  // namespace batchd

#include "client_lib/fan_out.hpp"

#include <utility>

namespace batchd {

std::shared_ptr<FanOut> FanOut::start(Client& client, std::span<const std::string_view> inputs,
                                      std::chrono::milliseconds timeout, const RequestOptions& options, Done done) {
  auto fan = std::make_shared<FanOut>(Passkey{}, client);
  if (inputs.empty()) {
    done(Outcome{});
    return fan;
  }
  std::vector<Client::AsyncSubmission> submissions = fan->prepare(inputs, options, std::move(done));
  if (client.submit_all_async(submissions, timeout)) {
    fan->admitted(submissions);
  } else {
    // Every submission carries the first refusal.
    fan->refused(std::move(*submissions.front().refused));
  }
  return fan;
}

std::vector<Client::AsyncSubmission> FanOut::prepare(std::span<const std::string_view> inputs,
                                                     const RequestOptions& options, Done done) {
  {
    std::lock_guard lock(mu_);
    results_.resize(inputs.size());
    // Callbacks may run on the polling thread before submit_all_async returns: all of them are
    // counted and done_ is set before any is submitted.
    unanswered_ = inputs.size();
    done_ = std::move(done);
    self_ = shared_from_this();
  }
  std::vector<Client::AsyncSubmission> submissions(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    submissions[i].input = inputs[i];
    submissions[i].priority = options.priority;
    submissions[i].model = options.model;
    submissions[i].cache_scope = options.cache_scope;
    submissions[i].trace = options.trace;
    // A raw `this`: the capture fits std::function's inline storage, and self_ keeps it alive.
    submissions[i].done = [this, i](Result&& result) { on_answer(i, std::move(result)); };
  }
  return submissions;
}

void FanOut::admitted(std::span<const Client::AsyncSubmission> submissions) {
  std::vector<std::uint64_t> withdraw;
  {
    std::lock_guard lock(mu_);
    ids_.reserve(submissions.size());
    for (const Client::AsyncSubmission& submission : submissions) ids_.push_back(submission.id);
    if (failed_) withdraw = unanswered_ids_locked();
  }
  if (!withdraw.empty()) client_.cancel(withdraw);
}

void FanOut::refused(Error error) {
  Done done;
  std::shared_ptr<FanOut> keep;  // released after mu_; start's own reference outlives it
  {
    std::lock_guard lock(mu_);
    unanswered_ = 0;
    done = std::exchange(done_, nullptr);
    keep = std::move(self_);
  }
  Outcome outcome;
  outcome.error = std::move(error);
  done(std::move(outcome));
}

void FanOut::cancel() {
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    if (!done_) return;  // already answered
    ids = unanswered_ids_locked();
  }
  if (!ids.empty()) client_.cancel(ids);
}

bool FanOut::answered() {
  std::lock_guard lock(mu_);
  return !done_;
}

void FanOut::on_answer(std::size_t index, Result&& result) {
  Done done;
  Outcome outcome;
  std::vector<std::uint64_t> withdraw;
  std::shared_ptr<FanOut> keep;  // released last, after mu_: this may be the FanOut's end
  {
    std::lock_guard lock(mu_);
    --unanswered_;
    const bool ok = result.ok();
    results_[index] = std::move(result);
    if (done_ && !ok) {
      done = std::exchange(done_, nullptr);
      outcome.error = results_[index]->error();
      // Before admitted() has the ids, it is left to withdraw the rest.
      if (ids_.empty()) {
        failed_ = true;
      } else {
        withdraw = unanswered_ids_locked();
      }
    } else if (done_ && unanswered_ == 0) {
      done = std::exchange(done_, nullptr);
      outcome.results.reserve(results_.size());
      for (std::optional<Result>& answer : results_) outcome.results.push_back(std::move(*answer));
    }
    if (unanswered_ == 0) keep = std::move(self_);
  }
  // Outside mu_: `done` may take the caller's locks, and cancel takes the client's.
  if (!withdraw.empty()) client_.cancel(withdraw);
  if (done) done(std::move(outcome));
}

std::vector<std::uint64_t> FanOut::unanswered_ids_locked() const {
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < ids_.size(); ++i) {
    if (!results_[i]) ids.push_back(ids_[i]);
  }
  return ids;
}

}  // namespace batchd

#include "client_lib/fan_out.hpp"

namespace batchd {

std::shared_ptr<FanOut> FanOut::start(Client& client, std::span<const std::string_view> inputs,
                                      std::chrono::milliseconds timeout, Priority priority, Done done) {
  auto fan = std::make_shared<FanOut>(client);
  if (inputs.empty()) {
    done(Outcome{});
    return fan;
  }
  std::vector<Client::AsyncSubmission> submissions(inputs.size());
  {
    std::lock_guard lock(fan->mu_);
    fan->results_.resize(inputs.size());
    // Callbacks may run on the polling thread before submit_many_async returns: counting every
    // input first keeps the count from reaching 0 before the refused ones are taken off.
    fan->unanswered_ = inputs.size();
    fan->done_ = std::move(done);
    fan->self_ = fan;
  }
  FanOut* raw = fan.get();  // the callbacks' capture fits std::function's inline storage
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    submissions[i].input = inputs[i];
    submissions[i].priority = priority;
    submissions[i].done = [raw, i](Result&& result) { raw->on_answer(i, std::move(result)); };
  }
  client.submit_many_async(submissions, timeout);
  const Error* refusal = nullptr;
  std::vector<std::uint64_t> withdraw;
  Done refused_done;
  std::shared_ptr<FanOut> last;
  {
    std::lock_guard lock(fan->mu_);
    for (Client::AsyncSubmission& submission : submissions) {
      if (!submission.refused) {
        fan->ids_.push_back(submission.id);
        continue;
      }
      --fan->unanswered_;
      if (refusal == nullptr) refusal = &*submission.refused;
    }
    if (refusal != nullptr && fan->done_) {
      refused_done = std::move(fan->done_);
      fan->done_ = nullptr;
      withdraw = fan->ids_;
    }
    if (fan->unanswered_ == 0) last = std::move(fan->self_);
  }
  if (refused_done) fan->fail(std::move(withdraw), std::move(refused_done), *refusal);
  return fan;
}

void FanOut::cancel() {
  std::vector<std::uint64_t> ids;
  {
    std::lock_guard lock(mu_);
    if (!done_) return;  // already answered
    ids = ids_;
  }
  for (const std::uint64_t id : ids) client_.cancel(id);
}

bool FanOut::answered() {
  std::lock_guard lock(mu_);
  return !done_;
}

void FanOut::on_answer(std::size_t index, Result&& result) {
  Done done;
  std::vector<std::uint64_t> withdraw;
  std::optional<Error> error;
  Outcome outcome;
  std::shared_ptr<FanOut> keep;  // released last, after mu_: this may be the FanOut's end
  {
    std::lock_guard lock(mu_);
    --unanswered_;
    if (done_) {
      if (!result.ok()) {
        done = std::move(done_);
        done_ = nullptr;
        withdraw = ids_;
        error = result.error();
      } else {
        results_[index] = std::move(result);
        if (unanswered_ == 0) {
          done = std::move(done_);
          done_ = nullptr;
          outcome.results.reserve(results_.size());
          for (std::optional<Result>& answered : results_) outcome.results.push_back(std::move(*answered));
        }
      }
    }
    if (unanswered_ == 0) keep = std::move(self_);
  }
  if (!done) return;
  if (error) {
    fail(std::move(withdraw), std::move(done), std::move(*error));
    return;
  }
  done(std::move(outcome));
}

void FanOut::fail(std::vector<std::uint64_t> ids, Done done, Error error) {
  for (const std::uint64_t id : ids) client_.cancel(id);
  Outcome outcome;
  outcome.error = std::move(error);
  done(std::move(outcome));
}

}  // namespace batchd

#include "tools/stress_shm_transport.hpp"

#include <string>
#include <vector>

#include "shm/layout.hpp"
#include "tools/stress_clock.hpp"
#include "tools/stress_stats.hpp"

namespace batchd::stress {

namespace {

Outcome outcome_of(const Result& result) noexcept {
  if (!result.ok()) return Outcome{false, {}, error_kind(result.error().code)};
  return Outcome{true, result.output(), 0};
}

class ShmCaller final : public Caller {
 public:
  ShmCaller(Client& client, std::chrono::milliseconds timeout) : client_(client), timeout_(timeout) {}
  Outcome call(std::string_view input, const RequestOptions& options) override {
    result_ = client_.submit(input, timeout_, options);
    return outcome_of(result_);  // result_ keeps the output until the next call
  }

 private:
  Client& client_;
  std::chrono::milliseconds timeout_;
  Result result_ = Result::failure(ErrorCode::kCancelled, {});
};

class ShmLane final : public OpenLane {
 public:
  ShmLane(Client& client, const Options& options, const InputPool& inputs)
      : client_(client), timeout_(options.timeout), inputs_(inputs) {
    input_.reserve(inputs.max_bytes());
    // poll() finishes at most one request per slot, so this never grows during the run.
    finished_.reserve(client.slot_count());
  }

  std::optional<std::size_t> submit(const DueRequest& request) override {
    const std::uint64_t id = request.id;
    inputs_.build(id, input_);
    // [this, id] fits std::function's small buffer, so the callback allocates nothing.
    const RequestOptions options{request.priority, request.model};
    auto error = client_.submit_async(input_, timeout_, options, [this, id](Result&& r) {
      finished_.push_back(Finished{id, now_ns(), std::move(r)});
    });
    if (error) return error_kind(error->code);
    return std::nullopt;
  }

  void submit_burst(std::span<const DueRequest> due, std::span<std::optional<std::size_t>> refused) override {
    if (inputs_burst_.size() < due.size()) {
      inputs_burst_.resize(due.size());
      submissions_.resize(due.size());
    }
    for (std::size_t i = 0; i < due.size(); ++i) {
      const std::uint64_t id = due[i].id;
      inputs_.build(id, inputs_burst_[i]);
      submissions_[i].input = inputs_burst_[i];
      submissions_[i].priority = due[i].priority;
      submissions_[i].model = due[i].model;
      submissions_[i].done = [this, id](Result&& r) {
        finished_.push_back(Finished{id, now_ns(), std::move(r)});
      };
    }
    const auto batch = std::span(submissions_).first(due.size());
    client_.submit_many_async(batch, timeout_);
    for (std::size_t i = 0; i < due.size(); ++i) {
      refused[i] = batch[i].refused ? std::optional<std::size_t>(error_kind(batch[i].refused->code)) : std::nullopt;
    }
  }

  void pump(std::int64_t wake_ns, Completions& done) override {
    // Rounded up, so a wait never ends just before wake_ns and spins.
    const std::int64_t wait_ns = std::max<std::int64_t>(wake_ns - now_ns(), 0);
    client_.poll_wait(std::chrono::microseconds((wait_ns + 999) / 1000));
    // Reported after poll() returns, so the reference hashing does not delay the time stamps
    // the callbacks take.
    for (const Finished& f : finished_) done.finished(f.id, f.done_ns, outcome_of(f.result));
    finished_.clear();
  }

 private:
  struct Finished {
    std::uint64_t id;
    std::int64_t done_ns;
    Result result;
  };

  Client& client_;
  std::chrono::milliseconds timeout_;
  const InputPool& inputs_;
  // The submitting thread's, and the pumping thread's (filled by callbacks inside poll()): both
  // written for every request, so on cache lines of their own.
  alignas(shm::kCacheLine) std::string input_;
  std::vector<std::string> inputs_burst_;  // submit_burst's inputs, kept for their capacity
  std::vector<Client::AsyncSubmission> submissions_;
  alignas(shm::kCacheLine) std::vector<Finished> finished_;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(Client& client, const Options& options, const InputPool& inputs)
      : client_(client), options_(options), inputs_(inputs) {}
  [[nodiscard]] bool reachable() const noexcept override { return client_.connected(); }
  std::unique_ptr<Caller> make_caller(unsigned /*thread*/) override {
    return std::make_unique<ShmCaller>(client_, options_.timeout);
  }
  [[nodiscard]] unsigned lane_count() const noexcept override { return 1; }
  [[nodiscard]] bool submit_while_pumping() const noexcept override { return true; }
  std::unique_ptr<OpenLane> make_lane(unsigned /*lane*/) override {
    return std::make_unique<ShmLane>(client_, options_, inputs_);
  }

 private:
  Client& client_;
  const Options& options_;
  const InputPool& inputs_;
};

}  // namespace

std::unique_ptr<Transport> make_shm_transport(Client& client, const Options& options,
                                              const InputPool& inputs) {
  return std::make_unique<ShmTransport>(client, options, inputs);
}

}  // namespace batchd::stress

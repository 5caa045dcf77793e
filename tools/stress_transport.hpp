// The seam between batchd-stress's load loops and what carries their requests: the shared-memory
// client (stress_shm_transport.hpp) or HTTP keep-alive connections (stress_http_transport.hpp).
// The loops own the schedule, the counting and the answer checks; a transport only takes a
// request out and brings back what it came to. Two shapes, one per loop:
//   closed loop: a Caller per thread sends one request and waits for it;
//   open loop:   an OpenLane takes paced submits and reports finished requests from pump().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "client_lib/client.hpp"

namespace batchd::stress {

// What one request came to.
struct Outcome {
  bool answered = false;       // an output came back (right or wrong: the loop checks it)
  std::string_view output;     // when answered; how long it stays valid is said where it is made
  std::size_t error_kind = 0;  // when not answered: an index of tools/stress_stats.hpp's kinds
};

// Closed loop: one thread's requests, one at a time. Not thread-safe: each thread owns one.
class Caller {
 public:
  virtual ~Caller() = default;
  // Sends input to the model and in the class `options` name and waits until it is answered,
  // fails or times out. The output stays valid until the next call.
  virtual Outcome call(std::string_view input, const RequestOptions& options) = 0;
};

// Where an open lane reports finished requests: implemented by the open loop.
class Completions {
 public:
  // Request `id` finished at done_ns (now_ns's clock). The outcome's output is valid only
  // during the call. Called from OpenLane::pump(), on its thread.
  virtual void finished(std::uint64_t id, std::int64_t done_ns, const Outcome& outcome) = 0;

 protected:
  ~Completions() = default;  // never owned through this interface
};

// A request the open loop's schedule says is due.
struct DueRequest {
  std::uint64_t id;
  std::int64_t intended_ns;
  Priority priority;
  std::string_view model;  // empty: the default model
};

// Open loop: one share of the schedule's requests, many in flight at once.
class OpenLane {
 public:
  virtual ~OpenLane() = default;
  // Sends request `request.id` (its input is InputPool::build(id)) in its class, which the
  // schedule meant to go at request.intended_ns. Refused at once: returns the error kind, and the
  // request never finishes. Otherwise exactly one Completions::finished() for it comes from a
  // later pump().
  [[nodiscard]] virtual std::optional<std::size_t> submit(const DueRequest& request) = 0;
  // Several requests that are all due now, as submit() would take them one by one; refused[i]
  // is what submit() would return for due[i]. A transport that can hand over many requests at
  // once (the shared-memory client: one ring publication) overrides it.
  virtual void submit_burst(std::span<const DueRequest> due, std::span<std::optional<std::size_t>> refused) {
    for (std::size_t i = 0; i < due.size(); ++i) refused[i] = submit(due[i]);
  }
  // Waits for the transport's I/O until wake_ns at the latest (sooner when something happens;
  // at once when nothing is in flight and wake_ns is never) and reports what finished.
  virtual void pump(std::int64_t wake_ns, Completions& done) = 0;
  // No submit follows: what is in flight is all that is left to finish.
  virtual void end_of_sends() noexcept {}
};

// What carries the requests; made once per run, before the loop's threads start.
class Transport {
 public:
  virtual ~Transport() = default;
  // False while requests cannot reach anything (the daemon is gone), so the loops stop sending
  // rather than count a long tail of failures. Any thread.
  [[nodiscard]] virtual bool reachable() const noexcept { return true; }
  // Closed loop: the caller of thread `thread` (0 .. options.threads - 1). Once per thread.
  virtual std::unique_ptr<Caller> make_caller(unsigned thread) = 0;
  // Open loop: how many lanes share the schedule (lane k sends ids k, k + n, k + 2n, ...).
  [[nodiscard]] virtual unsigned lane_count() const noexcept = 0;
  // Whether a lane may take submit() on one thread while another thread pumps it. Then the
  // loop paces from a thread of its own, which checking answers never holds up; otherwise one
  // thread does both, and pump() must return by wake_ns so the next request goes out on time.
  [[nodiscard]] virtual bool submit_while_pumping() const noexcept = 0;
  // Open loop: lane `lane` (0 .. lane_count() - 1). Once per lane.
  virtual std::unique_ptr<OpenLane> make_lane(unsigned lane) = 0;
};

}  // namespace batchd::stress

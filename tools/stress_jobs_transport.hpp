// The jobs transport (--protocol jobs): each request is an asynchronous job of one input, POSTed
// to /v1/jobs (answered 202 with its id) and polled with GET /v1/jobs/{id} until it is answered
// (docs/JOBS.md). A request's latency runs from its submission to the poll that saw its answer,
// and the answer is checked like any other. Closed loop: each thread submits and polls on its own
// connections. Open loop: each lane has a submitting thread and a polling thread, so a slow
// queue costs polls, not the schedule.
#pragma once

#include <memory>
#include <vector>

#include "tools/stress_http_transport.hpp"

namespace batchd::stress {

// Takes over `fds`, options.connections connections already open to target.endpoint.
std::unique_ptr<Transport> make_jobs_transport(const HttpTarget& target, std::vector<int> fds);

}  // namespace batchd::stress

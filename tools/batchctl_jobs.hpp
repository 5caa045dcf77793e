// batchctl jobs: the jobs queue in Redis as an operator sees it (docs/JOBS.md): each model's and
// class's depth, what is pending on which node, the oldest entry's age, redeliveries and dead
// letters; and a dead letter requeued or dropped.
#pragma once

#include <string>

namespace batchd::jobsctl {

struct Options {
  std::string redis_url;    // redis://HOST[:PORT][/DB]
  bool json = false;
  int dead = -1;            // >= 0: list this many of the most recent dead letters
  std::string requeue;      // a dead letter's entry id: back to its stream, its job pending again
  std::string drop;         // a dead letter's entry id: deleted
};

// Prints the report or does the change; the process's exit code (1 with the reason on stderr).
int run(const Options& options);

}  // namespace batchd::jobsctl

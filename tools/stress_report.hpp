// Turns a run's tallies into the summary, for people (text) and for scripts (one JSON line).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>

#include "tools/stress_loops.hpp"
#include "tools/stress_options.hpp"

namespace batchd::stress {

// What a set of requests (one priority class's, or the whole run's) came to.
struct Counts {
  std::uint64_t sent = 0, ok = 0, wrong = 0, errors = 0;
  std::array<std::uint64_t, kErrorKinds> errors_by_kind{};
  std::size_t samples = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;  // 0 without samples
};

// The run's totals, and each class's share of them.
struct Summary : Counts {
  double wall_s = 0.0;
  double rps = 0.0;  // finished requests (ok, wrong and errors) per second of wall time
  std::array<Counts, kPriorityClasses> by_class;  // index: Priority
};

// Sorts result.tallies' samples in place (and gathers them, emptying each class's): exact
// nearest-rank percentiles.
Summary summarize(RunResult& result);

void print_text(std::FILE* out, const Summary& summary, const Options& options);
// One line, no line breaks inside, so it can be picked off as the last line of stdout.
void print_json(std::FILE* out, const Summary& summary, const Options& options);

}  // namespace batchd::stress

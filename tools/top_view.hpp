// What `batchctl top` shows: the lines of one frame, computed from two status snapshots taken an
// interval apart. Rates are over that interval, not since the daemon started (a daemon up for a
// week must show last second's load), and the batch-size histogram is the interval's batches.
// Pure, so a test checks a frame without a terminal; tools/top_screen.cpp draws it.
#pragma once

#include <string>
#include <vector>

#include "client_lib/client.hpp"

namespace batchd::top {

struct Line {
  std::string text;
  bool heading = false;  // drawn in bold where the terminal can
};

// The frame for `now`, `seconds` after `before` (seconds > 0), at most `width` columns per line.
std::vector<Line> frame(const DaemonStatus& before, const DaemonStatus& now, double seconds, unsigned width);

}  // namespace batchd::top

// `batchctl top`: a live view of a running daemon that redraws in place (ncurses) on a terminal,
// and prints one plain frame per interval when its output is not a terminal.
#pragma once

#include "client_lib/client.hpp"

namespace batchd::top {

struct Options {
  double interval_s = 1.0;
  unsigned frames = 0;  // stop after this many frames; 0: until `q` or a signal
};

// Returns the process exit code.
int run(Client& client, const Options& options);

}  // namespace batchd::top

#include "tools/top_screen.hpp"

#include <curses.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "tools/top_view.hpp"

namespace batchd::top {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<Line> footer(const DaemonStatus& now, const Options& options) {
  std::vector<Line> out;
  // The status page is republished about every 50 ms; one much older means the daemon stopped
  // publishing (stopped, hung, or gone) and the numbers above are its last.
  if (now.age_ns > 2'000'000'000) {
    out.push_back({fmt::format("status is {:.1f} s old: the daemon is not publishing", now.age_ns / 1e9), true});
  }
  out.push_back({fmt::format("every {:.1f} s; q quits", options.interval_s)});
  return out;
}

int run_plain(Client& client, const Options& options) {
  DaemonStatus before = client.daemon_status();
  auto taken_at = Clock::now();
  for (unsigned n = 0; options.frames == 0 || n < options.frames; ++n) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
    const DaemonStatus now = client.daemon_status();
    const auto at = Clock::now();
    const double seconds = std::chrono::duration<double>(at - taken_at).count();
    std::string text;
    for (const Line& line : frame(before, now, seconds, 200)) text += line.text + '\n';
    std::cout << text << '\n' << std::flush;
    if (!std::cout) return 1;  // the reader went away
    before = now;
    taken_at = at;
  }
  return 0;
}

class Screen {
 public:
  Screen() {
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
  }
  ~Screen() { endwin(); }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void draw(const std::vector<Line>& lines) {
    erase();
    const int rows = LINES, cols = COLS;
    for (int y = 0; y < rows && y < static_cast<int>(lines.size()); ++y) {
      if (lines[y].heading) attron(A_BOLD);
      mvaddnstr(y, 0, lines[y].text.c_str(), cols);
      if (lines[y].heading) attroff(A_BOLD);
    }
    refresh();
  }

  // Waits until `deadline` for a key; true when it was one that quits.
  static bool quit_before(Clock::time_point deadline) {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      timeout(static_cast<int>(left));
      const int key = getch();
      if (key == 'q' || key == 'Q') return true;
    }
  }
};

int run_screen(Client& client, const Options& options) {
  Screen screen;
  screen.draw({{"batchd top: first numbers after one interval; q quits", true}});
  DaemonStatus before = client.daemon_status();
  auto taken_at = Clock::now();
  const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.interval_s));
  for (unsigned n = 0; options.frames == 0 || n < options.frames; ++n) {
    if (Screen::quit_before(taken_at + interval)) break;
    const DaemonStatus now = client.daemon_status();
    const auto at = Clock::now();
    std::vector<Line> lines = frame(before, now, std::chrono::duration<double>(at - taken_at).count(),
                                    static_cast<unsigned>(std::max(COLS, 1)));
    lines.push_back({""});
    for (Line& line : footer(now, options)) lines.push_back(std::move(line));
    screen.draw(lines);
    before = now;
    taken_at = at;
  }
  return 0;
}

}  // namespace

int run(Client& client, const Options& options) {
  if (options.interval_s <= 0) {
    std::cerr << "batchctl top: --interval must be above 0\n";
    return 2;
  }
  return ::isatty(STDOUT_FILENO) && ::isatty(STDIN_FILENO) ? run_screen(client, options) : run_plain(client, options);
}

}  // namespace batchd::top

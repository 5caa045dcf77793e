#!/usr/bin/env bash
# batchctl top on a terminal (tmux): under load it draws rates, the batch-size histogram and the
# devices in place, and `q` quits it; with its output not a terminal it prints plain frames.
# Usage: check_top.sh  (BATCHD_BIN, BATCHD_STRESS_BIN, BATCHD_CTL_BIN from meson's test env)
set -euo pipefail
work=$(mktemp -d)
tmux_server="batchd-top-$$"  # a tmux server of its own: parallel runs must not share one
daemon_pid=""
load_pid=""
cleanup() {
  tmux -L "$tmux_server" kill-server 2>/dev/null || true
  rm -f "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/$tmux_server"  # kill-server leaves its socket file
  [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

socket=$work/batchd.sock
"$BATCHD_BIN" --socket "$socket" --backend sim --sim-devices 2 --sim-fixed-us 2000 --sim-per-item-us 20 \
  --log-level warn &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || fail "batchd did not start"
"$BATCHD_STRESS_BIN" --socket "$socket" --expect-sim 1 --rate 500 --duration 30 >"$work/load.txt" 2>&1 &
load_pid=$!

# A terminal of 100 x 30; the exit code lands in a file once top quits.
tmux -L "$tmux_server" new-session -d -s top -x 100 -y 30 \
  "'$BATCHD_CTL_BIN' --socket '$socket' top --interval 0.5; echo \$? >'$work/top.rc'"
pane=""
for _ in $(seq 100); do  # up to 10 s (sanitizer builds start slowly)
  sleep 0.1
  pane=$(tmux -L "$tmux_server" capture-pane -p -t top)
  grep -qE 'requests/s: [1-9][0-9]* answered ok' <<<"$pane" && break
done
echo "$pane"
grep -qE 'requests/s: [1-9][0-9]* answered ok' <<<"$pane" || fail "no answered requests drawn"
grep -q '^batchd top: backend sim' <<<"$pane" || fail "no header"
grep -qE '^ +[0-9]+\.\.[0-9]+ +[1-9][0-9]* #+' <<<"$pane" || fail "no batch-size histogram row"
# A device's state may read laggard while its first fits settle (a sanitizer build's first batches).
[ "$(grep -cE '^[01] +(healthy|laggard)' <<<"$pane")" = 2 ] || fail "not one row per device"
grep -q 'q quits' <<<"$pane" || fail "no footer"
# It redraws in place: a second capture shows one frame, not two stacked.
[ "$(grep -c '^batchd top:' <<<"$pane")" = 1 ] || fail "frames are stacked, not redrawn"

tmux -L "$tmux_server" send-keys -t top q
for _ in $(seq 50); do [ -f "$work/top.rc" ] && break; sleep 0.1; done
[ -f "$work/top.rc" ] || fail "q did not quit"
[ "$(cat "$work/top.rc")" = 0 ] || fail "top exited $(cat "$work/top.rc")"

# Not a terminal: two plain frames, then it stops by itself.
plain=$("$BATCHD_CTL_BIN" --socket "$socket" top --interval 0.3 --frames 2 </dev/null)
[ "$(grep -c '^batchd top:' <<<"$plain")" = 2 ] || fail "plain mode did not print 2 frames: $plain"
echo "ok"

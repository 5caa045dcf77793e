#!/usr/bin/env bash
# batchd exits with status 75 (EX_TEMPFAIL, on which systemd restarts it) once every device is
# lost, and a request held at that moment is answered by the next daemon on the socket. The real
# main runs against the fake CUDA runtime with two devices; touching the fault file makes the
# next kernel launch fault as an illegal access would, which loses both. The held request's
# client (batchd-send) re-attaches to the second daemon by itself.
# Usage: check_exit_lost.sh BATCHD_FAKE_CUDA  (BATCHD_SEND_BIN, BATCHD_TEST_SLOWDOWN from the env)
set -uo pipefail
batchd=$1
slow=${BATCHD_TEST_SLOWDOWN:-1}
work=$(mktemp -d /tmp/check-exit-lost.XXXXXX) || exit 1
socket=$work/batchd.sock
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do [ -f "$log" ] && sed "s|^|$(basename "$log"): |" "$log"; done
  exit 1
}

start_daemon() {  # log name, extra environment...
  local log=$1
  shift
  env FAKE_CUDA_DEVICES=2 "$@" "$batchd" --backend cuda --socket "$socket" --log-level info \
    2>"$work/$log.log" &
  pids+=("$!")
}

# Waits up to $2 seconds for process $1 to exit, then sets exit_status to its status.
await_exit() {
  local pid=$1 tenths=$(($2 * 10))
  while kill -0 "$pid" 2>/dev/null && ((tenths-- > 0)); do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && return 1
  exit_status=0
  wait "$pid" || exit_status=$?
  local i  # reaped: its pid may be another process's by the clean-up, which must not kill it
  for i in "${!pids[@]}"; do
    if [ "${pids[i]}" = "$pid" ]; then unset 'pids[i]'; fi
  done
}

sha256_hex() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

start_daemon first FAKE_CUDA_FAULT_FILE="$work/fault"
first=${pids[-1]}
for _ in $(seq $((100 * slow))); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || fail "the first batchd did not start"
answer=$("$BATCHD_SEND_BIN" --socket "$socket" --timeout-ms $((20000 * slow)) warm-up) ||
  fail "the warm-up request failed"
[ "$answer" = "$(sha256_hex warm-up)" ] || fail "warm-up answered $answer"

touch "$work/fault"
held="across the restart"
"$BATCHD_SEND_BIN" --socket "$socket" --timeout-ms $((120000 * slow)) "$held" >"$work/held.out" \
  2>"$work/send.log" &
send=$!
pids+=("$send")
await_exit "$first" $((30 * slow)) || fail "batchd still runs after its devices were lost"
[ "$exit_status" = 75 ] || fail "batchd exited $exit_status, not 75, when every device was lost"
grep -q "every cuda device is lost" "$work/first.log" || fail "no 'every cuda device is lost'"

sleep 0.5  # as systemd's RestartSec would: the client waits with no daemon
kill -0 "$send" 2>/dev/null || fail "the held request ended with the first batchd"
start_daemon second
second=${pids[-1]}
await_exit "$send" $((60 * slow)) || fail "the held request is unanswered by the second batchd"
[ "$exit_status" = 0 ] || fail "the held request failed (batchd-send exit $exit_status)"
[ "$(cat "$work/held.out")" = "$(sha256_hex "$held")" ] ||
  fail "the held request answered $(cat "$work/held.out")"

# A stop request still exits 0: status 75 is the lost devices' alone.
kill -TERM "$second"
await_exit "$second" $((30 * slow)) || fail "the second batchd did not stop on SIGTERM"
[ "$exit_status" = 0 ] || fail "the second batchd exited $exit_status on SIGTERM"
echo "ok"

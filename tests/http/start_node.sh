# Sourced by the shell tests here (curl_smoke.sh, openapi_contract.sh): start_node runs batchd and
# batchd-http, the front-end on a free loopback port it writes to $dir/port, in a fresh temp dir
# $dir; both are stopped and $dir removed when the sourcing shell exits. Callers wait for
# readiness themselves: each has its own tool for it.
# shellcheck shell=bash

start_node() {  # temp dir name, batchd-http --workers, more batchd flags...
  local name=$1 workers=$2
  shift 2
  dir=$(mktemp -d "/tmp/batchd-$name-XXXXXX")
  pids=()
  trap stop_node EXIT
  "$BATCHD_BIN" --socket "$dir/d.sock" --max-wait-ms 1 --log-level warn "$@" &
  pids+=($!)
  "$BATCHD_HTTP_BIN" --socket "$dir/d.sock" --listen 127.0.0.1:0 --port-file "$dir/port" \
    --workers "$workers" --log-level warn &
  pids+=($!)
}

# The trap's clean-up: a process that already exited makes kill fail, and wait returns the
# status of one stopped by the kill; neither is the test's failure, which the caller has decided.
stop_node() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}

#!/usr/bin/env bash
# Quick start: set up, build, and run batchd in the foreground on the cpu backend.
# Extra arguments go to batchd (for example --max-wait-ms 5 or --socket PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
if [ ! -d build-release ]; then
  meson setup build-release -Dbuildtype=release -Dtests=disabled >/dev/null
fi
ninja -C build-release >/dev/null

socket=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--socket" ] && ((i + 1 < ${#args[@]})); then socket="${args[$((i + 1))]}"; fi
done
if [ -z "$socket" ]; then
  if [ "$(id -u)" -eq 0 ] || [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    socket=/run/batchd/batchd.sock
  else
    socket="$XDG_RUNTIME_DIR/batchd/batchd.sock"
  fi
  args+=(--socket "$socket")
fi
echo "batchd: socket $socket (Ctrl-C stops it)"
echo "send it a request:  build-release/tools/batchd-send --socket $socket 'hello'"
echo "load it:            build-release/tools/batchd-stress --socket $socket --rate 10000 --duration 10"
exec build-release/daemon/batchd --backend cpu "${args[@]}"

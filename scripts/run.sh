#!/usr/bin/env bash
# Quick start: set up, build, and run batchd in the foreground serving two models, batchstring on
# the cpu backend and "reversed" on the sim backend (docs/MODELS.md), with its HTTP front-end
# batchd-http beside it on 127.0.0.1:8080 (HTTP_LISTEN overrides) and its gRPC one, batchd-grpc,
# on 127.0.0.1:8001 (GRPC_LISTEN). Extra arguments go to batchd (for example --max-wait-ms 5 or
# --socket PATH; a --model or --config of their own replaces the second model). batchstring is
# pure, so its answers are cached (docs/CACHE.md). Ctrl-C stops all three.
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
models=(--model "reversed:backend=sim,sim_devices=1,sim_fixed_us=200")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--socket" ] && ((i + 1 < ${#args[@]})); then socket="${args[$((i + 1))]}"; fi
  case "${args[$i]}" in --model | --model=* | --config | --config=*) models=() ;; esac
done
if [ -z "$socket" ]; then
  if [ "$(id -u)" -eq 0 ] || [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    socket=/run/batchd/batchd.sock
  else
    socket="$XDG_RUNTIME_DIR/batchd/batchd.sock"
  fi
  args+=(--socket "$socket")
fi
listen=${HTTP_LISTEN:-127.0.0.1:8080}
grpc_listen=${GRPC_LISTEN:-127.0.0.1:8001}
# The front-ends attach whenever the daemon is up, so they may start first.
build-release/frontend/batchd-http --listen "$listen" --socket "$socket" --workers 1 &
http_pid=$!
build-release/grpc_frontend/batchd-grpc --listen "$grpc_listen" --socket "$socket" --log-level warn &
grpc_pid=$!
trap 'kill "$http_pid" "$grpc_pid" 2>/dev/null; wait "$http_pid" "$grpc_pid" 2>/dev/null' EXIT
echo "batchd: socket $socket, HTTP on $listen, gRPC on $grpc_listen (Ctrl-C stops all three)"
echo "send it a request:  build-release/tools/batchd-send --socket $socket 'hello'"
echo "over HTTP:          curl -s http://$listen/v1/batchstring -d '{\"input\": \"hello\"}'"
if ((${#models[@]})); then
  echo "the second model:   build-release/tools/batchd-send --socket $socket --model reversed 'hello'"
  echo "                    curl -s http://$listen/v1/models/reversed -d '{\"input\": \"hello\"}'"
fi
echo "Triton's clients:    http://$listen/v2 and $grpc_listen (models by name; docs/OIP.md)"
echo "load it:            build-release/tools/batchd-stress --socket $socket --rate 10000 --duration 10"
build-release/daemon/batchd --backend cpu --model batchstring:cache=on "${models[@]}" "${args[@]}"

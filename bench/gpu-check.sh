#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (written for the lent H200: x86-64, CUDA 13
# driver, no package registry). Needs only the programs of a build made with CUDA on (they link
# the CUDA runtime statically; see --stage below). Within about two minutes it
#   1. compares cuda and cpu answers for 1,000,000 random strings (cost 1) and 100,000 (cost 3),
#   2. measures kernel and Backend::run() throughput for batch sizes 1, 8, 64, 512 and 4096,
#   3. measures end-to-end requests/s over shared memory: batchd --backend cuda driven by
#      batchd-stress, closed loop (16 threads) and open loop (10,000/s), 10 s each; again with
#      --max-wait-ms 1 (with the default 50 ms wait, 16 closed-loop callers never fill a batch
#      of 64, so that run measures the wait: about 16 / 0.05 s = 320 requests/s); and the
#      defaults against --backend cpu as the baseline.
# Step 3 needs the daemon's cuda wiring (--backend cuda, daemon/backend_factory.cpp); a daemon
# without it fails to start and the step is recorded as failed.
#
# Usage: bench/gpu-check.sh [BUILD_DIR]   (default build-debug)
#   BASELINE=0 skips the cpu baseline; STRINGS=N changes the size of check 1.
# Prints readable lines; writes ${OUT:-.}/gpu-check.json. Exits 0 when every check passed,
# 77 when no GPU is visible, 1 otherwise.
#
# A whole build folder is too big to ship to the GPU machine (hundreds of MB with debug info),
# and that machine may lack this one's shared libraries (fmt, spdlog, simdjson, liburing):
#   bench/gpu-check.sh --stage BUILD_DIR [STAGE_DIR]   (default build-gpu-check, git-ignored)
# copies just the three programs, stripped, in the build folder's layout, with the shared
# libraries they load (all but glibc's and the C++ runtime's) in STAGE_DIR/runtime-libs, which
# this script puts on LD_LIBRARY_PATH. Then, there: bench/gpu-check.sh build-gpu-check
set -uo pipefail
cd "$(dirname "$0")/.."

programs=(bench/gpu_check daemon/batchd tools/batchd-stress)

stage() {  # build, stage
  local build=$1 stage=$2
  for exe in "${programs[@]}"; do
    [ -x "$build/$exe" ] || { echo "gpu-check: $build/$exe is missing" >&2; return 1; }
  done
  # Only a folder this function made (it leaves a marker) is ever removed.
  if [ -e "$stage" ] && [ ! -f "$stage/.gpu-check-stage" ]; then
    echo "gpu-check: $stage exists and is not a stage folder; not touching it" >&2
    return 1
  fi
  rm -rf "$stage"
  mkdir -p "$stage"/{bench,daemon,tools,client_lib,runtime-libs}
  touch "$stage/.gpu-check-stage"
  for exe in "${programs[@]}"; do strip --strip-debug -o "$stage/$exe" "$build/$exe" || return 1; done
  # Shared libraries by the names the loader asks for (links resolved), glibc's and the C++
  # runtime's left to the machine (its own are as new or newer).
  local skip='/(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
  local name path
  while read -r name path; do
    case "$name" in
      libbatchd-client.so*) strip --strip-debug -o "$stage/client_lib/$name" "$build/client_lib/$name" ;;
      *) cp -L "$path" "$stage/runtime-libs/$name" ;;
    esac
  done < <(for exe in "${programs[@]}"; do ldd "$build/$exe"; done |
           awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | grep -Ev "$skip")
  echo "gpu-check: staged into $stage ($(du -sh "$stage" | cut -f1)): carry it, then run bench/gpu-check.sh $stage"
}

if [ "${1:-}" = "--stage" ]; then
  stage "${2:?usage: bench/gpu-check.sh --stage BUILD_DIR [STAGE_DIR]}" "${3:-build-gpu-check}"
  exit
fi

build=${1:-build-debug}
if [ -d "$build/runtime-libs" ]; then
  export LD_LIBRARY_PATH="$PWD/$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
out_dir=${OUT:-.}
json_out="$out_dir/gpu-check.json"
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
daemon_pid=""
status=0

cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT

for exe in "${programs[@]}"; do
  if [ ! -x "$build/$exe" ]; then
    echo "gpu-check: $build/$exe is missing: build with CUDA on (meson setup $build -Dcuda=enabled; ninja -C $build)" >&2
    exit 1
  fi
  if missing=$(ldd "$build/$exe" 2>/dev/null | grep "not found"); then
    echo "gpu-check: $build/$exe cannot load: $missing (stage the build with --stage)" >&2
    exit 1
  fi
done
mkdir -p "$out_dir"

gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "gpu-check: ${gpu_name:-no nvidia-smi}; build $build"

# ---- 1 and 2: correctness and throughput (gpu_check) -----------------------------------------
echo "== correctness (cuda vs cpu reference) and throughput"
timeout 240 "$build/bench/gpu_check" --strings "${STRINGS:-1000000}" --json "$work/gpu_check.json"
gpu_rc=$?
if [ "$gpu_rc" -eq 77 ]; then
  echo "gpu-check: skipped: no GPU visible"
  printf '{"skipped": true}\n' >"$json_out"
  exit 77
fi
[ "$gpu_rc" -eq 0 ] || status=1

# ---- 3: end to end through shared memory ----------------------------------------------------
# Starts batchd (label, socket, flags...); returns non-zero if it is not listening within 60 s
# (the cuda backend allocates its buffers and self-tests every device before it listens).
start_daemon() {
  local label=$1 sock=$2
  shift 2
  rm -f "$sock"
  "$build/daemon/batchd" --socket "$sock" --log-level warn "$@" >"$work/batchd-$label.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 600); do
    [ -S "$sock" ] && return 0
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "gpu-check: batchd $* did not start:" >&2
  tail -5 "$work/batchd-$label.log" >&2
  kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
  return 1
}

stop_daemon() {
  kill "$daemon_pid" 2>/dev/null
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
}

# Runs batchd-stress; prints its summary and leaves its JSON line (or null) in $work/$name.json.
# A run with wrong answers or errors keeps its JSON but fails the check.
stress() {
  local name=$1 sock=$2
  shift 2
  echo "-- $name: batchd-stress $*"
  timeout 60 "$build/tools/batchd-stress" --socket "$sock" --duration 10 --json --quiet "$@" \
    >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  head -n -1 "$work/$name.out"
  local last
  last=$(tail -n 1 "$work/$name.out")
  if [ "${last:0:1}" = "{" ]; then printf '%s' "$last" >"$work/$name.json"; else printf 'null' >"$work/$name.json"; fi
  if [ "$rc" -ne 0 ]; then
    echo "gpu-check: $name failed (exit $rc) $(tail -3 "$work/$name.err")" >&2
    status=1
  fi
}

e2e() {  # label, batchd flags...
  local label=$1 sock="$work/batchd-$1.sock"
  shift
  echo "== end to end: batchd $*"
  if start_daemon "$label" "$sock" "$@"; then
    stress "$label-closed" "$sock" --threads 16
    stress "$label-open" "$sock" --rate 10000
    stop_daemon
  else
    printf 'null' >"$work/$label-closed.json"
    printf 'null' >"$work/$label-open.json"
    status=1
  fi
}

e2e cuda --backend cuda
e2e cuda-wait1 --backend cuda --max-wait-ms 1
if [ "${BASELINE:-1}" != 0 ]; then e2e cpu --backend cpu; fi

# ---- the JSON file ------------------------------------------------------------------------
json_or_null() { if [ -s "$1" ]; then cat "$1"; else printf 'null'; fi; }
e2e_json() {  # key, label
  printf ',\n "%s": {"closed_threads16": %s, "open_rate10000": %s}' "$1" \
    "$(json_or_null "$work/$2-closed.json")" "$(json_or_null "$work/$2-open.json")"
}
{
  printf '{"gpu": "%s", "build": "%s", "ok": %s,\n' "${gpu_name//\"/}" "$build" \
    "$([ "$status" -eq 0 ] && echo true || echo false)"
  printf ' "gpu_check": %s' "$(json_or_null "$work/gpu_check.json")"
  e2e_json e2e_cuda cuda
  e2e_json e2e_cuda_max_wait_1ms cuda-wait1
  if [ "${BASELINE:-1}" != 0 ]; then e2e_json e2e_cpu_baseline cpu; fi
  printf '}\n'
} >"$json_out"
echo "gpu-check: $([ "$status" -eq 0 ] && echo PASSED || echo FAILED); results in $json_out"
exit "$status"

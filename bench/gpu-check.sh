#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (written for the lent H200: x86-64, 16 cores, no
# package registry, 10 minutes per command). Needs only the programs of a build made with CUDA on
# (they link the CUDA runtime statically; see --stage below). Steps, each under its own timeout:
#   nvidia-smi, versions   the driver first: a driver older than the static runtime's CUDA major
#                          version cannot run anything here, so the check stops at once and says so;
#   correctness-cost1      cuda against the cpu reference on 1,000,000 strings: every length
#                          around a SHA-256 padding boundary up to 65,536 bytes (batchd's largest
#                          input), multi-block inputs, the rest random;
#   correctness-cost1000   the same at cost 1000, on 100,000 strings;
#   throughput-cost1, -cost1000   kernel and Backend::run() inputs/s and GB/s for batches of
#                          1, 64, 1024, 8192 and 65,536 inputs;
#   e2e-*                  batchd --backend cuda over shared memory, driven by GPU_CHECK_CLIENTS
#                          batchd-stress processes: open loop at 10k, 100k, 250k and 500k req/s,
#                          one saturating closed loop, and (a second daemon) cost 1000 at 4k req/s.
# The worst case (every timeout spent, plus the daemons' start and stop allowances) is printed
# first, and the check refuses to start if it exceeds 300 s.
#
# Usage: bench/gpu-check.sh [BUILD_DIR]   (default build-debug)
#        bench/gpu-check.sh --budget      prints the worst-case budget, step by step, and exits
# Prints readable lines and a table; writes ${OUT:-.}/gpu-check.json (also for a run that stopped
# or failed: every step is there, with its status). Exits 0 when every step passed, 77 when no GPU
# is visible, 1 otherwise.
#
# Settings (environment), for experiments and for the dry run without a GPU
# (tests/check_gpu_check.sh runs this script against a fake gpu_check and the cpu backend):
#   GPU_CHECK_BACKEND=cuda          the e2e daemon's --backend (cpu or sim in the dry run)
#   GPU_CHECK_RATE_SCALE=1          multiplies every open-loop rate
#   GPU_CHECK_CLIENTS=4             batchd-stress processes per e2e point (the tool's open loop
#                                   over shared memory is one client: one pacing, one pumping thread)
#   GPU_CHECK_CLOSED_THREADS=64     threads per process in the closed-loop point
#   GPU_CHECK_STRESS_SECONDS=3      measured seconds per e2e point, after
#   GPU_CHECK_WARMUP_SECONDS=1      open-loop warm-up seconds
#   GPU_CHECK_STRINGS=1000000, GPU_CHECK_HIGH_COST_STRINGS=100000   correctness sizes
#   GPU_CHECK_STEP_TIMEOUT_SCALE=1  multiplies the timeouts of the nvidia-smi and gpu_check steps
#   GPU_CHECK_DAEMON_FLAGS          more batchd flags for the e2e daemons (word-split)
#
# A whole build folder is too big to ship to the GPU machine (hundreds of MB with debug info),
# and that machine may lack this one's shared libraries (fmt, spdlog, simdjson, liburing):
#   bench/gpu-check.sh --stage BUILD_DIR [STAGE_DIR]   (default build-gpu-check, git-ignored)
# copies just the three programs, stripped, in the build folder's layout, with the shared
# libraries they load (all but glibc's and the C++ runtime's) in STAGE_DIR/runtime-libs, which
# this script puts on LD_LIBRARY_PATH. Then, there: bench/gpu-check.sh build-gpu-check
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

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

# ---- settings and the budget ------------------------------------------------------------------

backend=${GPU_CHECK_BACKEND:-cuda}
rate_scale=${GPU_CHECK_RATE_SCALE:-1}
clients=${GPU_CHECK_CLIENTS:-4}
closed_threads=${GPU_CHECK_CLOSED_THREADS:-64}
stress_s=${GPU_CHECK_STRESS_SECONDS:-3}
warmup_s=${GPU_CHECK_WARMUP_SECONDS:-1}
strings=${GPU_CHECK_STRINGS:-${STRINGS:-1000000}}
high_cost_strings=${GPU_CHECK_HIGH_COST_STRINGS:-100000}
step_scale=${GPU_CHECK_STEP_TIMEOUT_SCALE:-1}
high_cost=1000
budget_limit_s=300
kill_grace_s=2       # after a step's timeout, SIGKILL follows this much later
daemon_start_s=20    # the cuda backend allocates and self-tests every device before it listens
daemon_stop_s=5
# Open-loop rates (req/s, before GPU_CHECK_RATE_SCALE) by step name.
open_points=(e2e-open-10k:10000 e2e-open-100k:100000 e2e-open-250k:250000 e2e-open-500k:500000)
high_cost_rate=4000

# ceil(a * b) for decimals, at least 1.
ceil_mul() { awk -v a="$1" -v b="$2" 'BEGIN { x = a * b; c = int(x); if (c < x) c++; if (c < 1) c = 1; print c }'; }

# A stress run ends by itself within warm-up + window + a request's timeout (2 s) + connecting
# (2 s); the rest is slack for a loaded machine.
stress_timeout_s=$(ceil_mul "$(awk -v a="$stress_s" -v b="$warmup_s" 'BEGIN { print a + b }')" 1)
stress_timeout_s=$((stress_timeout_s + 8))

# Step names in order, with their timeouts.
steps=(nvidia-smi versions correctness-cost1 "correctness-cost$high_cost" throughput-cost1
       "throughput-cost$high_cost")
declare -A timeout_s=(
  [nvidia-smi]=$(ceil_mul 10 "$step_scale")
  [versions]=$(ceil_mul 15 "$step_scale")
  [correctness-cost1]=$(ceil_mul 40 "$step_scale")
  [correctness-cost$high_cost]=$(ceil_mul 30 "$step_scale")
  [throughput-cost1]=$(ceil_mul 20 "$step_scale")
  [throughput-cost$high_cost]=$(ceil_mul 25 "$step_scale")
)
for point in "${open_points[@]}" e2e-closed:0 "e2e-cost$high_cost-open-4k:$high_cost_rate"; do
  steps+=("${point%%:*}")
  timeout_s[${point%%:*}]=$stress_timeout_s
done

budget_s=$((2 * (daemon_start_s + daemon_stop_s)))
budget_line="daemon start ${daemon_start_s}+stop ${daemon_stop_s} (x2)"
for name in "${steps[@]}"; do
  budget_s=$((budget_s + timeout_s[$name] + kill_grace_s))
  budget_line+=", $name ${timeout_s[$name]}"
done

print_budget() {
  echo "gpu-check: worst-case budget ${budget_s} s (limit ${budget_limit_s} s): $budget_line, each step +${kill_grace_s} s to kill"
}

if [ "${1:-}" = "--budget" ]; then
  print_budget
  [ "$budget_s" -le "$budget_limit_s" ]
  exit
fi

build=${1:-build-debug}
out_dir=${OUT:-.}
json_out="$out_dir/gpu-check.json"
work=$(mktemp -d /tmp/gpu-check.XXXXXX) || exit 1
daemon_pid=""
stress_pids=()
status=0
stopped=""
gpu_line=""
start_time=$EPOCHREALTIME

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${stress_pids[@]}"; do kill "$pid" 2>/dev/null; done
  if [ -n "$daemon_pid" ]; then kill -KILL "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; fi
  # The daemons' logs come back with the results: the batch ceiling each chose, any warning.
  cp "$work"/batchd-*.log "$out_dir"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- recording steps and writing the results ---------------------------------------------------

json_escape() {  # text -> a JSON string, quotes included
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/ }
  s=${s//[$'\001'-$'\037']/ }
  printf '"%s"' "$s"
}

# The first number after "key": in a flat JSON file; empty when absent.
json_num() { grep -o "\"$2\": *-\?[0-9.e+]*" "$1" 2>/dev/null | head -1 | sed 's/.*: *//'; }
json_str() { grep -o "\"$2\": *\"[^\"]*\"" "$1" 2>/dev/null | head -1 | sed 's/^[^:]*: *"//; s/"$//'; }

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# record NAME STATUS SECONDS MESSAGE SUMMARY [RESULT_FILE]: one step's entry. A result file that
# is not a JSON object (a step killed while writing it, or none) is recorded as null.
record() {
  local name=$1 state=$2 seconds=$3 message=$4 summary=$5 result=${6:-} body=null
  if [ -n "$result" ] && [ "$(head -c 1 "$result" 2>/dev/null)" = "{" ]; then body=$(cat "$result"); fi
  {
    printf '{"name": "%s", "status": "%s", "timeout_s": %s, "seconds": %s, "message": %s, ' \
      "$name" "$state" "${timeout_s[$name]}" "$seconds" "$(json_escape "$message")"
    printf '"summary": %s, "result": %s}' "$(json_escape "$summary")" "$body"
  } >"$work/step-$name.json"
  printf '%s\t%s\t%s\t%s\n' "$name" "$state" "$seconds" "${summary:-$message}" >"$work/row-$name.tsv"
  case $state in passed | "not run") ;; *) status=1 ;; esac
  echo "gpu-check: $name $state ($seconds s)${message:+: $message}"
}

write_results() {  # exit code
  local name first=1 ok=false
  [ "$1" -eq 0 ] && ok=true
  {
    printf '{"ok": %s, "exit_code": %s, "stopped": %s, "gpu": %s, "build": %s, "backend": %s,\n' \
      "$ok" "$1" "$([ -n "$stopped" ] && json_escape "$stopped" || echo null)" \
      "$(json_escape "$gpu_line")" "$(json_escape "$build")" "$(json_escape "$backend")"
    printf ' "budget_s": %s, "budget_limit_s": %s, "seconds": %s,\n' "$budget_s" \
      "$budget_limit_s" "$(elapsed "$start_time")"
    printf ' "settings": {"rate_scale": %s, "clients": %s, "closed_threads": %s, "stress_seconds": %s, "warmup_seconds": %s, "strings": %s, "high_cost_strings": %s, "high_cost": %s},\n' \
      "$rate_scale" "$clients" "$closed_threads" "$stress_s" "$warmup_s" "$strings" \
      "$high_cost_strings" "$high_cost"
    printf ' "steps": ['
    for name in "${steps[@]}"; do
      [ -f "$work/step-$name.json" ] || record "$name" "not run" 0 "" "" >/dev/null
      [ "$first" = 1 ] || printf ','
      first=0
      printf '\n  %s' "$(cat "$work/step-$name.json")"
    done
    printf '\n]}\n'
  } >"$json_out"
}

print_table() {
  local name
  printf '\n%-26s %-8s %6s  %s\n' step status secs result
  for name in "${steps[@]}"; do
    [ -f "$work/row-$name.tsv" ] || continue
    IFS=$'\t' read -r name state seconds text <"$work/row-$name.tsv"
    printf '%-26s %-8s %6s  %s\n' "$name" "$state" "$seconds" "$text"
  done
}

finish() {  # exit code
  local verdict=FAILED
  case $1 in 0) verdict=PASSED ;; 77) verdict=SKIPPED ;; esac
  write_results "$1"
  print_table
  echo "gpu-check: $verdict in $(elapsed "$start_time") s; results in $json_out"
  exit "$1"
}

timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

stop_check() {  # exit code, why
  stopped=$2
  echo "gpu-check: stopped: $2" >&2
  finish "$1"
}

# ---- checks before any step -------------------------------------------------------------------

mkdir -p "$out_dir" || exit 1
print_budget
if [ "$budget_s" -gt "$budget_limit_s" ]; then
  stop_check 1 "worst-case budget ${budget_s} s exceeds ${budget_limit_s} s: lower GPU_CHECK_STRESS_SECONDS or the step timeouts"
fi
if [ ! -d "$build" ]; then stop_check 1 "$build is not a build folder"; fi
build=$(cd "$build" && pwd)
if [ -d "$build/runtime-libs" ]; then
  export LD_LIBRARY_PATH="$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for exe in "${programs[@]}"; do
  if [ ! -x "$build/$exe" ]; then
    stop_check 1 "$build/$exe is missing: build with CUDA on (meson setup BUILD -Dcuda=enabled; ninja -C BUILD)"
  fi
  if missing=$(ldd "$build/$exe" 2>/dev/null | grep "not found"); then
    stop_check 1 "$build/$exe cannot load: $missing (stage the build with --stage)"
  fi
done
echo "gpu-check: build $build, e2e backend $backend, started $(date -u +%FT%TZ)"

# ---- the driver ---------------------------------------------------------------------------------

t0=$EPOCHREALTIME
gpu_line=$(timeout -k "$kill_grace_s" "${timeout_s[nvidia-smi]}" nvidia-smi \
  --query-gpu=driver_version,name,memory.total --format=csv,noheader 2>"$work/nvidia-smi.err" | head -1)
smi_rc=${PIPESTATUS[0]}
if timed_out "$smi_rc"; then
  record nvidia-smi timeout "$(elapsed "$t0")" "nvidia-smi did not answer within ${timeout_s[nvidia-smi]} s" ""
  stop_check 1 "nvidia-smi hangs: the driver is not answering"
elif [ "$smi_rc" -ne 0 ] || [ -z "$gpu_line" ]; then
  record nvidia-smi skipped "$(elapsed "$t0")" "no GPU: nvidia-smi exit $smi_rc $(head -c 300 "$work/nvidia-smi.err")" ""
  stop_check 77 "no NVIDIA GPU or driver visible (nvidia-smi exit $smi_rc)"
fi
record nvidia-smi passed "$(elapsed "$t0")" "" "driver, name, memory: $gpu_line"
smi_driver=${gpu_line%%,*}

# The static runtime runs on a driver of its own CUDA major version or newer (minor-version
# compatibility covers an older minor: the kernels carry SASS for sm_80..sm_90).
t0=$EPOCHREALTIME
timeout -k "$kill_grace_s" "${timeout_s[versions]}" "$build/bench/gpu_check" versions \
  --json "$work/versions.json" >"$work/versions.out" 2>&1
rc=$?
cat "$work/versions.out"
if [ "$rc" -ne 0 ]; then
  state=failed
  if timed_out "$rc"; then state=timeout; fi
  record versions "$state" "$(elapsed "$t0")" "gpu_check versions exit $rc: $(tail -c 300 "$work/versions.out")" "" "$work/versions.json"
  stop_check 1 "cannot read the driver's and runtime's CUDA versions"
fi
driver=$(json_num "$work/versions.json" driver_version)
runtime=$(json_num "$work/versions.json" runtime_version)
devices=$(json_num "$work/versions.json" devices)
version() { echo "$(($1 / 1000)).$(($1 % 1000 / 10))"; }
if [ "${driver:-0}" -eq 0 ]; then
  record versions failed "$(elapsed "$t0")" "no CUDA driver library loads (nvidia-smi: driver $smi_driver)" "" "$work/versions.json"
  stop_check 1 "the CUDA runtime finds no driver (libcuda.so) although nvidia-smi reports driver $smi_driver"
elif [ $((driver / 1000)) -lt $((${runtime:-0} / 1000)) ]; then
  why="driver $smi_driver supports CUDA $(version "$driver"), older than CUDA $(version "$runtime") of this build's static runtime, which cannot run on it: install a driver for CUDA $(version "$runtime") or newer, or rebuild with a CUDA $((driver / 1000)) toolkit"
  record versions failed "$(elapsed "$t0")" "$why" "" "$work/versions.json"
  stop_check 1 "$why"
elif [ "${devices:-0}" -eq 0 ]; then
  record versions skipped "$(elapsed "$t0")" "no usable GPU: $(json_str "$work/versions.json" device_error)" "" "$work/versions.json"
  stop_check 77 "the CUDA runtime sees no GPU: $(json_str "$work/versions.json" device_error)"
fi
note=""
[ "$driver" -lt "$runtime" ] && note=" (older minor: runs by minor-version compatibility)"
record versions passed "$(elapsed "$t0")" "" "$(json_str "$work/versions.json" summary)$note" "$work/versions.json"

# ---- correctness and throughput (gpu_check) ------------------------------------------------------

gpu_step() {  # name, gpu_check arguments...
  local name=$1 rc state=passed message=""
  shift
  echo "== $name: gpu_check $*"
  local t0=$EPOCHREALTIME
  timeout -k "$kill_grace_s" "${timeout_s[$name]}" "$build/bench/gpu_check" "$@" \
    --json "$work/$name.json" 2>&1 | tee "$work/$name.out"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) ;;
    124 | 137) state=timeout message="cut after ${timeout_s[$name]} s" ;;
    77) state=failed message="gpu_check saw no GPU although the versions step did" ;;
    *) state=failed message="gpu_check exit $rc: $(tail -c 300 "$work/$name.out")" ;;
  esac
  record "$name" "$state" "$(elapsed "$t0")" "$message" "$(json_str "$work/$name.json" summary)" "$work/$name.json"
}

gpu_step correctness-cost1 correctness --cost 1 --strings "$strings"
gpu_step "correctness-cost$high_cost" correctness --cost "$high_cost" --strings "$high_cost_strings"
gpu_step throughput-cost1 throughput --cost 1
gpu_step "throughput-cost$high_cost" throughput --cost "$high_cost"

# ---- end to end through shared memory --------------------------------------------------------------

# A batch shape that can carry 500k req/s: no --max-batch, so the daemon sizes batches to fill the
# GPU (the kernel's resident threads / streams: ~33,800 a stream on an H200, where 1 ms of
# arrivals at the top rate is 500; docs/GPU.md), as a user's daemon does; a 1 ms wait ceiling,
# 4 streams so copies overlap kernels, and slots for bursts. Inputs are batchd-stress's
# (16..256 bytes) and answers 64 hex characters, so the per-slot sizes are cut to keep each
# client's segment small. Each daemon's log keeps the ceiling it chose.
daemon_flags=(--streams-per-device 4 --max-wait-ms 1 --slots-per-client 4096
              --max-input-bytes 4096 --max-output-bytes 256)
read -r -a extra_daemon_flags <<<"${GPU_CHECK_DAEMON_FLAGS:-}"

start_daemon() {  # cost; returns non-zero (the log's tail on stderr) if it does not listen in time
  local sock="$work/batchd-cost$1.sock" deadline
  rm -f "$sock"
  "$build/daemon/batchd" --socket "$sock" --log-level info --backend "$backend" --cost "$1" \
    "${daemon_flags[@]}" "${extra_daemon_flags[@]}" >"$work/batchd-cost$1.log" 2>&1 &
  daemon_pid=$!
  deadline=$((SECONDS + daemon_start_s))
  while [ "$SECONDS" -lt "$deadline" ]; do
    [ -S "$sock" ] && return 0
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
  done
  tail -5 "$work/batchd-cost$1.log" >&2
  stop_daemon
  return 1
}

stop_daemon() {
  local deadline=$((SECONDS + daemon_stop_s))
  kill "$daemon_pid" 2>/dev/null
  while kill -0 "$daemon_pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  kill -KILL "$daemon_pid" 2>/dev/null
  wait "$daemon_pid" 2>/dev/null
  daemon_pid=""
}

# Sums the clients' JSON lines into one result: requests and answers/s add up; the latency
# percentiles are the worst client's (an upper bound on the merged percentile).
aggregate() {  # offered rate (0: closed loop), cost, files...
  local rate=$1 cost=$2
  shift 2
  awk -v rate="$rate" -v cost="$cost" -v clients="$#" '
    function num(key,   m) { return match($0, "\"" key "\":[-0-9.e+]+") ? substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0 : 0 }
    FNR == 1 { lines = lines (n++ ? ", " : "") $0
               sent += num("sent"); ok += num("ok"); errors += num("errors"); wrong += num("wrong")
               rps += num("rps"); if (num("p50_us") > p50) p50 = num("p50_us"); if (num("p99_us") > p99) p99 = num("p99_us") }
    END { printf "{\"mode\": \"%s\", \"offered_per_s\": %s, \"cost\": %s, \"clients\": %d, \"clients_reporting\": %d, \"sent\": %d, \"ok\": %d, \"errors\": %d, \"wrong\": %d, \"achieved_per_s\": %.1f, \"p50_us_worst_client\": %.1f, \"p99_us_worst_client\": %.1f, \"per_client\": [%s]}\n", (rate > 0 ? "open" : "closed"), rate, cost, clients, n, sent, ok, errors, wrong, rps, p50, p99, lines }' "$@"
}

# One e2e point: GPU_CHECK_CLIENTS batchd-stress processes at once, each with the same timeout.
e2e_point() {  # name, offered rate (0: closed loop), cost
  local name=$1 rate=$2 cost=$3 c rc state=passed message="" pid
  local t0=$EPOCHREALTIME load files=() rcs=()
  if [ "$rate" = 0 ]; then
    load=(--threads "$closed_threads" --duration "$stress_s")
  else
    load=(--rate "$(awk -v r="$rate" -v s="$rate_scale" -v c="$clients" 'BEGIN { print r * s / c }')"
          --warmup "$warmup_s" --duration "$stress_s")
  fi
  echo "== $name: $clients x batchd-stress ${load[*]} --cost $cost"
  stress_pids=()
  for ((c = 0; c < clients; c++)); do
    timeout -k "$kill_grace_s" "${timeout_s[$name]}" "$build/tools/batchd-stress" \
      --socket "$work/batchd-cost$cost.sock" --json --quiet --cost "$cost" --timeout-ms 2000 \
      --seed $((c + 1)) "${load[@]}" >"$work/$name.$c.out" 2>"$work/$name.$c.err" &
    stress_pids+=($!)
  done
  for pid in "${stress_pids[@]}"; do wait "$pid"; rcs+=($?); done
  stress_pids=()
  for ((c = 0; c < clients; c++)); do
    tail -n 1 "$work/$name.$c.out" | grep '^{' >"$work/$name.$c.json" && files+=("$work/$name.$c.json")
    rc=${rcs[$c]}
    if timed_out "$rc"; then
      state=timeout message="client $c cut after ${timeout_s[$name]} s"
    elif [ "$rc" -ne 0 ] && [ "$state" = passed ]; then
      state=failed message="client $c exit $rc: $(tail -c 200 "$work/$name.$c.err")"
    fi
  done
  aggregate "$(awk -v r="$rate" -v s="$rate_scale" 'BEGIN { print r * s }')" "$cost" "${files[@]}" \
    >"$work/$name.json" </dev/null
  local r="$work/$name.json"
  if [ "$state" = passed ] && [ "$(json_num "$r" clients_reporting)" != "$clients" ]; then
    state=failed message="only $(json_num "$r" clients_reporting) of $clients clients reported"
  fi
  local summary
  summary=$(printf '%s: %s/s answered, p50 %s us, p99 %s us; %s errors, %s wrong' \
    "$([ "$rate" = 0 ] && echo "closed loop, $((clients * closed_threads)) callers" || echo "offered $(json_num "$r" offered_per_s)/s")" \
    "$(json_num "$r" achieved_per_s)" "$(json_num "$r" p50_us_worst_client)" \
    "$(json_num "$r" p99_us_worst_client)" "$(json_num "$r" errors)" "$(json_num "$r" wrong)")
  record "$name" "$state" "$(elapsed "$t0")" "$message" "$summary" "$r"
}

e2e_daemon() {  # cost, then name:rate points (rate 0: closed loop)
  local cost=$1 point
  shift
  echo "== end to end: batchd --backend $backend --cost $cost ${daemon_flags[*]} ${extra_daemon_flags[*]}"
  if ! start_daemon "$cost"; then
    for point in "$@"; do
      record "${point%%:*}" failed 0 "batchd --backend $backend --cost $cost did not listen within ${daemon_start_s} s: $(tail -c 300 "$work/batchd-cost$cost.log")" ""
    done
    return
  fi
  for point in "$@"; do e2e_point "${point%%:*}" "${point##*:}" "$cost"; done
  stop_daemon
}

e2e_daemon 1 "${open_points[@]}" e2e-closed:0
e2e_daemon "$high_cost" "e2e-cost$high_cost-open-4k:$high_cost_rate"

finish "$status"

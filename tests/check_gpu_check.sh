#!/usr/bin/env bash
# The dry run of bench/gpu-check.sh, without a GPU: the script runs against a stage folder whose
# gpu_check is tests/fake_gpu_check.sh, with a fake nvidia-smi on PATH, and the e2e steps drive a
# real batchd (--backend cpu) with the real batchd-stress at rates scaled down. Checks that the
# budget is printed and within 300 s (and that a larger one is refused), that the JSON file is
# valid with every step, that a hanging step is cut by its timeout while the rest still run within
# the budget, that a failing step fails the run, and that an old driver stops it at once.
# With GPU_CHECK_FAKE_CUDA (the real gpu_check linked against tests/cuda's fake runtime), first
# a smoke run of each of its steps: exit codes and the JSON keys the script reads.
# Usage: check_gpu_check.sh GPU_CHECK_SH FAKE_GPU_CHECK PYTHON3 [GPU_CHECK_FAKE_CUDA]
#   (BATCHD_BIN, BATCHD_STRESS_BIN and BATCHD_TEST_SLOWDOWN from meson's test env)
set -uo pipefail
script=$1 fake=$2 python=$3 fake_cuda=${4:-}
work=$(mktemp -d /tmp/check-gpu-check.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

# The real gpu_check's steps, on the fake CUDA runtime (a host SHA-256 for a kernel).
if [ -n "$fake_cuda" ]; then
  smoke() {  # expected exit, name, gpu_check arguments...
    local want=$1 name=$2 got
    shift 2
    timeout 120 "$fake_cuda" "$@" --json "$work/smoke-$name.json" >"$work/smoke-$name.log" 2>&1
    got=$?
    sed 's/^/   /' "$work/smoke-$name.log"
    [ "$got" -eq "$want" ] || fail "gpu_check $*: exit $got, not $want"
  }
  smoke 0 versions versions
  # Up to 2048 bytes: 32 block edges, 5 lengths at each but 2049, and 0, 1: 161 boundary inputs.
  smoke 0 correctness correctness --strings 3000 --max-input-bytes 2048 --threads 2
  # Wrong answers from the kernel: the backend's self-test refuses it, and the step fails.
  FAKE_CUDA_CORRUPT=1 smoke 1 corrupt correctness --strings 300 --max-input-bytes 256 --threads 2
  grep -q "wrong answer" "$work/smoke-corrupt.log" || fail "wrong answers went unreported"
  # Each ladder point is at least 23 launches, hashed on the host by the fake runtime: under the
  # sanitizers the 8,192 and 65,536 points alone take minutes, so those builds stop at 1,024.
  if [ "${BATCHD_TEST_SLOWDOWN:-1}" = 1 ]; then ladder="1, 64, 1024, 8192, 65536"; largest=65536
  else ladder="1, 64, 1024"; largest=1024; fi
  smoke 0 throughput throughput --seconds-per-point 0.01 --largest-batch "$largest"
  "$python" - "$work" "$ladder" <<'PY' || fail "gpu_check's JSON: see above"
import json, sys
w = sys.argv[1]
load = lambda name: json.load(open(f"{w}/smoke-{name}.json"))
v, c, t = load("versions"), load("correctness"), load("throughput")
problems = []
if not (v["driver_version"] == v["runtime_version"] > 0 and v["devices"] == 1 and v["summary"]):
    problems.append(f"versions {v}")
if not (c["strings"] == 3000 and c["boundary_strings"] == 161 and c["mismatches"] == 0
        and c["failed_batches"] == 0 and c["cost"] == 1 and c["summary"]):
    problems.append(f"correctness {c}")
if [p["batch"] for p in t["points"]] != [int(s) for s in sys.argv[2].split(",")] or t["failed"]:
    problems.append(f"throughput {t}")
if not all(p["kernel_inputs_per_s"] > 0 and p["kernel_gb_per_s"] > 0
           and p["input_bytes"] >= 16 * p["batch"] for p in t["points"]):
    problems.append(f"throughput points {t['points']}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
PY
fi

# The budget on the real settings: printed, within 300 s.
env -u GPU_CHECK_STRESS_SECONDS -u GPU_CHECK_WARMUP_SECONDS -u GPU_CHECK_STEP_TIMEOUT_SCALE \
  bash "$script" --budget >"$work/budget.log" 2>&1 || fail "--budget: $(cat "$work/budget.log")"
budget=$(sed -n 's/.*worst-case budget \([0-9]*\) s (limit 300 s).*/\1/p' "$work/budget.log")
echo "real budget: $(cat "$work/budget.log")"
if [ -z "$budget" ] || [ "$budget" -gt 300 ]; then fail "no budget line within 300 s"; fi

# The stage folder, in the build folder's layout: the programs' folders are links to the build's,
# so that their library paths (relative to $ORIGIN) still resolve.
stage=$work/stage
mkdir -p "$stage/bench" "$work/bin" "$work/nobin"
cp "$fake" "$stage/bench/gpu_check"
ln -s "$(dirname "$BATCHD_BIN")" "$stage/daemon"
ln -s "$(dirname "$BATCHD_STRESS_BIN")" "$stage/tools"
printf '#!/bin/sh\necho "580.65.06, NVIDIA H200 (fake), 143771 MiB"\n' >"$work/bin/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' \
  >"$work/nobin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi" "$work/nobin/nvidia-smi"

# Small loads: a cpu daemon on a shared machine (slower still under the sanitizers).
slowdown=${BATCHD_TEST_SLOWDOWN:-1}
export GPU_CHECK_BACKEND=cpu GPU_CHECK_CLIENTS=2 GPU_CHECK_CLOSED_THREADS=2
export GPU_CHECK_STRESS_SECONDS=1 GPU_CHECK_WARMUP_SECONDS=0.5
GPU_CHECK_RATE_SCALE=$(awk -v s="$slowdown" 'BEGIN { print 0.01 / s }')
# The gpu_check steps' timeouts at a tenth, so a hanging one is cut in seconds.
export GPU_CHECK_RATE_SCALE GPU_CHECK_STEP_TIMEOUT_SCALE=0.1

# run NAME PATH_DIR [VAR=VALUE...]: the script in its own output folder; exit code in $rc,
# wall seconds in $secs.
run() {
  local name=$1 bin=$2
  shift 2
  mkdir -p "$work/$name"
  local t0=$EPOCHREALTIME
  env "$@" OUT="$work/$name" PATH="$bin:$PATH" bash "$script" "$stage" >"$work/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  echo "== $name: exit $rc in $secs s"
  sed 's/^/   /' "$work/$name.log"
}

# check_json NAME EXIT DEFAULT 'STEP=STATUS,...': every step present with the status given (the
# rest DEFAULT), the exit code recorded, each e2e step that passed answered with no error or wrong
# answer, and the wall time within the budget the script printed.
check_json() {
  "$python" - "$work/$1/gpu-check.json" "$2" "$3" "$4" "$secs" <<'PY' || fail "$1: gpu-check.json: see above"
import json, sys
path, exit_code, default, overrides, secs = sys.argv[1:]
exit_code, secs = int(exit_code), float(secs)
doc = json.load(open(path))
want = {s.split("=")[0]: s.split("=")[1] for s in overrides.split(",") if s}
names = ["nvidia-smi", "versions", "correctness-cost1", "correctness-cost1000", "throughput-cost1",
         "throughput-cost1000", "e2e-open-10k", "e2e-open-100k", "e2e-open-250k", "e2e-open-500k",
         "e2e-closed", "e2e-cost1000-open-4k"]
steps = {s["name"]: s for s in doc["steps"]}
problems = []
if [s["name"] for s in doc["steps"]] != names: problems.append(f"steps {list(steps)}")
if doc["exit_code"] != exit_code or doc["ok"] != (exit_code == 0): problems.append("exit code")
refused = "exceeds 300 s" in (doc["stopped"] or "")
if not 0 < doc["budget_s"] <= 300 and not refused: problems.append(f"budget {doc['budget_s']}")
if secs > doc["budget_s"]: problems.append(f"ran {secs} s, over the budget of {doc['budget_s']} s")
for name in names:
    step = steps.get(name, {})
    status = want.get(name, default)
    if step.get("status") != status: problems.append(f"{name}: {step.get('status')}, not {status}")
    if status == "timeout" and step["seconds"] > step["timeout_s"] + 3:
        problems.append(f"{name}: cut after {step['seconds']} s, timeout {step['timeout_s']} s")
    r = step.get("result")
    if name.startswith("e2e") and status == "passed":
        if not (r and r["ok"] > 0 and r["errors"] == 0 and r["wrong"] == 0 and r["achieved_per_s"] > 0
                and r["clients_reporting"] == r["clients"] == 2 and r["p99_us_worst_client"] > 0):
            problems.append(f"{name}: result {r}")
    if name.startswith(("correctness", "throughput")) and status == "passed" and not r:
        problems.append(f"{name}: no result")
if exit_code == 1 and not doc["stopped"] and default != "passed": problems.append("no stop reason")
if problems:
    print("\n".join(problems))
    sys.exit(1)
PY
}

# A budget over 300 s is refused before any step.
run refused "$work/bin" GPU_CHECK_STRESS_SECONDS=100
if [ "$rc" -ne 1 ] || ! grep -q "exceeds 300 s" "$work/refused.log"; then
  fail "a budget over 300 s was not refused"
fi
check_json refused 1 "not run" ""

# No driver: skipped (77).
run no-gpu "$work/nobin"
[ "$rc" -eq 77 ] || fail "no GPU: exit $rc, not 77"
check_json no-gpu 77 "not run" "nvidia-smi=skipped"

# An old driver: stops at once, before any other step, saying why.
run old-driver "$work/bin" FAKE_DRIVER_VERSION=12040 FAKE_RUNTIME_VERSION=13000
[ "$rc" -eq 1 ] || fail "old driver: exit $rc, not 1"
grep -q "supports CUDA 12.4, older than CUDA 13.0 of this build's static runtime" "$work/old-driver.log" ||
  fail "old driver: no clear message"
awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "old driver: took $secs s to stop"
check_json old-driver 1 "not run" "nvidia-smi=passed,versions=failed"

# Everything passes.
run pass "$work/bin" FAKE_CALLS="$work/calls"
[ "$rc" -eq 0 ] || fail "all passing: exit $rc, not 0"
grep -q "worst-case budget [0-9]* s (limit 300 s)" "$work/pass.log" || fail "no budget line"
grep -qE "^e2e-open-500k +passed" "$work/pass.log" || fail "no table"
check_json pass 0 passed ""
# The script asked gpu_check for what the check promises.
for call in "correctness --cost 1 --strings 1000000" "correctness --cost 1000 --strings 100000" \
            "throughput --cost 1" "throughput --cost 1000"; do
  grep -qx "$call --json .*" "$work/calls" || fail "no gpu_check $call: $(cat "$work/calls")"
done
# The daemons' logs come back with the results (they say which batch ceiling the daemon chose).
for cost in 1 1000; do
  grep -q "batchd listening on .* max batch [0-9]*" "$work/pass/batchd-cost$cost.log" ||
    fail "no daemon log for cost $cost in the output folder: $(ls "$work/pass")"
done

# A hanging step is cut by its timeout and a failing one fails the run; the rest still run.
run hang "$work/bin" FAKE_HANG=throughput-cost1000 FAKE_FAIL=correctness-cost1000
[ "$rc" -eq 1 ] || fail "hang: exit $rc, not 1"
check_json hang 1 passed "throughput-cost1000=timeout,correctness-cost1000=failed"
echo "PASS"

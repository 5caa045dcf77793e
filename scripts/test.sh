#!/usr/bin/env bash
# Sets up, builds and runs every test: a debug-optimized build at full test sizes, then the same
# suites under ASan+UBSan and under TSan at smaller sizes. Ends with one line "N passed, N failed"
# (meson tests over all three builds; ", N skipped" follows) and exits non-zero on any failure.
# Each test a build defines (meson test --list) counts once: a build failure counts all of them as
# failed, and so does a test without a result; only the GPU test may be skipped.
#
#   scripts/test.sh           everything, as CI runs it (.ci/run)
#   scripts/test.sh --quick   the debug build's tests only: the developer's loop
#
# The schedule, for a machine of 2 cores: the tests wait far more than they compute (a third of
# the cores while they run), so the sanitizer builds compile (both at once) behind the debug
# build at the lowest CPU priority (nice 19), on the cores its compile and its tests leave idle;
# they build only what their tests run, as unity builds (one translation unit per target: the
# headers parsed and the templates instantiated once). The debug build compiles what its tests
# need first, the fuzz binaries behind its tests the same way, and the rest (the benchmark
# programs) last, after the sanitizer builds' compiles, which are on the run's critical path. The
# two sanitizer suites run side by side, each as soon as its build is done; nothing runs beside
# the debug build's tests but those niced compiles, so its tight time bounds (no slowdown factor)
# see an otherwise quiet machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

# Each phase's wall time, printed at the end of every run: "label|started|ended" (epoch seconds),
# from files, since the sanitizer builds compile and test in processes of their own.
run_started=$(date +%s)
times=build-times
rm -rf "$times"
mkdir -p "$times"
phase() {  # label, started (epoch s): ends now
  echo "$1|$2|$(date +%s)" >>"$times/phases"
}

# The Debian packages first; the Python environment (.venv: PyPI's downloads) then comes beside
# the sanitizer builds, which do not use it (the debug build's configure does: nanobind).
started=$(date +%s)
SETUP_SKIP_VENV=1 scripts/setup.sh || exit 1
source scripts/env.sh
phase "setup: Debian packages" "$started"
venv_started=$(date +%s)
scripts/setup_venv.sh >"$times/venv.log" 2>&1 &
venv_setup=$!

configure() {  # dir, meson options...   ($compilers: CC=... CXX=... for meson, if set)
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    # shellcheck disable=SC2086  # one assignment per word
    env ${compilers:-} meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
}

# Tests that may exit 77 (meson: SKIP), by name: the GPU test, where this machine has no GPU. Any
# other skip means a missing tool or a broken set-up, and counts as a failure.
may_skip=(cuda_backend)

# Says which CUDA tests a build leaves out, and why, rather than leaving them silently absent.
cuda_tests_note() {  # dir, label, test list
  local dir=$1 label=$2 list=$3 t cuda_option
  local missing=()
  for t in cuda_host cuda_backend; do
    grep -qE "(^| / )$t\$" "$list" || missing+=("$t")
  done
  if ((${#missing[@]})); then
    cuda_option=$(meson introspect "$dir" --buildoptions | python3 -c 'import json, sys
print({o["name"]: o["value"] for o in json.load(sys.stdin)}["cuda"])')
    if [ "$cuda_option" = disabled ]; then
      echo "== $label: not built: ${missing[*]} (they need the CUDA backend; this build has" \
        "-Dcuda=disabled)"
    else
      echo "== $label: not built: ${missing[*]} (they need the CUDA backend; meson found" \
        "no usable CUDA toolkit: see $dir/meson-logs/meson-log.txt)"
    fi
  fi
  if ! grep -qE "(^| / )cuda_backend_host\$" "$list"; then
    echo "== $label: not built: cuda_backend_host (it needs the CUDA toolkit's headers; none found)"
  fi
}

# Builds what a configuration's tests need. Leaves its exit status in $times/DIR.built.
compile() {  # dir, label[, ninja's parallel jobs]
  local dir=$1 label=$2 jobs=${3:-} from rc targets
  from=$(date +%s)
  # shellcheck disable=SC2086  # one target per word
  targets=$(python3 scripts/test_targets.py "$dir" 2>"$dir.build.log") &&
    ninja -C "$dir" ${jobs:+-j "$jobs"} $targets >"$dir.build.log" 2>&1
  rc=$?
  phase "$label: compile" "$from"
  echo "$rc" >"$times/$dir.built"
}

# The fuzz tests' binaries, behind the debug build's tests like the sanitizer builds: their tests
# would otherwise build them in their own (serial) time. A failure here shows in the fuzz test,
# which builds again.
compile_fuzz() {
  local from target
  from=$(date +%s)
  for target in http v2 segment; do
    tests/fuzz/run-fuzz.sh "$PWD" "$PWD/build-debug/tests/fuzz" 0 "$target" >/dev/null 2>&1
  done
  phase "fuzz binaries" "$from"
}

# The rest of the debug build, which no test runs (the benchmark programs, gpu_check): built so
# that every program is checked to build, last, once the sanitizer builds have compiled (it is
# on no test's path, and they are on the run's). Leaves its exit status in
# $times/build-debug-rest.built.
compile_rest() {
  local from rc
  while [ ! -f "$times/build-debug.built" ]; do  # the debug build compiles its tests' part first
    kill -0 "$$" 2>/dev/null || return
    sleep 1
  done
  from=$(date +%s)
  ninja -C build-debug >build-debug-rest.build.log 2>&1
  rc=$?
  phase "debug build: the rest" "$from"
  echo "$rc" >"$times/build-debug-rest.built"
}

# Waits for the background compile() of a build to leave its status (a failure, if the process
# compiling it is gone without one).
wait_built() {  # dir
  while [ ! -f "$times/$1.built" ]; do
    kill -0 "$background_compile" 2>/dev/null || { echo 1 >"$times/$1.built"; return; }
    sleep 1
  done
}

# Runs a build's tests and leaves "passed failed skipped" in $times/DIR.counts.
run_tests() {  # dir, label
  local dir=$1 label=$2 from
  local list=$dir/meson-logs/testlist.txt log=$dir/meson-logs/testlog.json
  from=$(date +%s)
  # A log left by the last run must not be counted again when this one writes none.
  rm -f "$log" "$list"
  # The tests this build defines: each must report a result, or counts as failed.
  meson test -C "$dir" --no-rebuild --list >"$list" || echo "== $label: meson test --list failed"
  local listed
  listed=$(grep -c . "$list")
  if [ "$(cat "$times/$dir.built")" != 0 ]; then
    tail -50 "$dir.build.log"
    echo "== $label: BUILD FAILED: its $listed tests did not run"
    echo "0 $((listed > 0 ? listed : 1)) 0" >"$times/$dir.counts"
    return
  fi
  echo "== $label: testing $listed tests"
  cuda_tests_note "$dir" "$label" "$list"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 2>&1 |
    grep -vE '^\s*$' | tail -40
  local meson_rc=${PIPESTATUS[0]}
  phase "$label: tests" "$from"
  local counts
  counts=$(python3 - "$list" "$log" "$meson_rc" "${may_skip[*]}" "$label" <<'PY'
import json, sys
list_path, log_path, meson_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
may_skip = set(sys.argv[4].split())
label = sys.argv[5]
listed = [line.rstrip("\n") for line in open(list_path) if line.strip()]
try:
    results = [json.loads(line) for line in open(log_path) if line.strip()]
except FileNotFoundError:
    results = []
ok = bad = skip = 0
for r in results:
    name, result = r["name"], r.get("result")
    if result == "SKIP" and name.split(" / ")[-1] in may_skip:
        skip += 1
    elif result == "SKIP":
        bad += 1
        print(f"FAILED: {name} skipped (exit 77), which only a GPU test may do", file=sys.stderr)
    elif result in ("OK", "EXPECTEDFAIL"):
        ok += 1
    else:
        bad += 1
        # The run's output keeps only its last lines; a failed test's own, here, says why.
        lines = (r.get("stdout") or "").splitlines()
        # doctest's failed assertions may lie far above those last lines: each with the two
        # lines after it (its values, its context).
        failed_at = [i for i, line in enumerate(lines) if ": ERROR: " in line or "FATAL ERROR" in line]
        if failed_at:
            print(f"== {label}: {name}: its first {min(len(failed_at), 8)} failed assertions:",
                  *(l for i in failed_at[:8] for l in lines[i:i + 3]), sep="\n", file=sys.stderr)
        print(f"== {label}: {name} {result}: the last {min(len(lines), 60)} lines of its output:",
              *lines[-60:], sep="\n", file=sys.stderr)
not_run = list(listed)
for r in results:
    if r["name"] in not_run:
        not_run.remove(r["name"])
for name in not_run:
    print(f"FAILED: {name} has no result (the run did not reach it)", file=sys.stderr)
bad += len(not_run)
if not listed:
    print("FAILED: meson test --list names no test", file=sys.stderr)
    bad += 1
if meson_rc != 0 and bad == 0:
    print(f"FAILED: meson test exited {meson_rc} with no failed test in its log", file=sys.stderr)
    bad += 1
slowest = sorted(results, key=lambda r: -r["duration"])[:5]
print(f"== {label}: slowest: " + ", ".join(f'{r["name"].split(" / ")[-1]} {r["duration"]:.0f} s'
                                          for r in slowest), file=sys.stderr)
print(ok, bad, skip)
PY
)
  [ -n "$counts" ] || counts="0 $((listed > 0 ? listed : 1)) 0"  # the counter itself failed
  echo "$counts" >"$times/$dir.counts"
}

# The fuzz tests' binaries do not depend on the build that runs them: one copy for all three.
export BATCHD_FUZZ_DIR=$PWD/build-fuzz

# Debug info as line tables and functions (-g1): what a sanitizer's report and a backtrace need,
# at three quarters of -g's compile time. (A build for gdb: meson setup with plain -g.)
debug_info=(-Dcpp_args=-g1 -Dc_args=-g1)
started=$(date +%s)
builds=(build-debug)
if [ "$quick" = 0 ]; then
  # The sanitizer builds compile with clang (Debian's 14, which the fuzz targets use too): at -O0
  # with the sanitizers' instrumentation it compiles the project's largest units in half to two
  # thirds of g++'s time (the daemon's unity file under ASan: 27 CPU-seconds against 53), and these
  # compiles are the run's critical path. The debug build stays g++'s, so both compilers' warnings
  # are errors on every change.
  compilers="CC=clang CXX=clang++" configure build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcuda=disabled -Dtest_scale=0.25 -Dunity=on -Dunity_size=100 "${debug_info[@]}" || exit 1
  # No gRPC in TSan's: its tests run none (Debian's gRPC is not built for TSan), and compiling the
  # generated protobuf code under TSan for batchd-stress's --grpc alone cost its compile minutes.
  # Nor the OpenTelemetry SDK, built on the same gRPC and absl: tracing's own code (the tracer, the
  # sampler, the door) is tested there against a sink of the test's.
  compilers="CC=clang CXX=clang++" configure build-tsan -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false -Dgrpc=disabled -Dtracing=disabled \
    -Dcuda=disabled -Dtest_scale=0.2 -Dunity=on -Dunity_size=100 "${debug_info[@]}" || exit 1
  builds+=(build-asan build-tsan)
  phase "configure the sanitizer builds" "$started"
  # Both at once: each is ready when the debug build's tests end, and the two suites then run
  # side by side, mostly waiting, rather than the second compile overlapping the first suite and
  # the second suite then running alone (at 5e1ab5e: TSan compiled by 757 s, ASan by 1,398 s,
  # and its suite ran alone until 1,793 s). Two jobs each, four in all as when one build's
  # ninja ran alone: eight niced compilers beside the debug build's tests cost class_floor its
  # latency bound (361 ms against 100).
  echo "== TSan and ASan+UBSan builds: compiling behind the debug build (nice 19)"
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    compile build-tsan "TSan build" 2 &
    compile build-asan "ASan+UBSan build" 2 &
    wait
    compile_rest
  ) &
  background_compile=$!
fi

if ! wait "$venv_setup"; then
  cat "$times/venv.log"
  echo "== setup of .venv failed"
  [ "$quick" = 1 ] || { pkill -P "$background_compile"; kill "$background_compile"; } 2>/dev/null
  exit 1
fi
cat "$times/venv.log"
phase "setup: .venv" "$venv_started"
started=$(date +%s)
# The full suite builds the debug build as a unity build too: a quarter less compile time (433 to
# 323 CPU-seconds for its test targets, measured here), and the sanitizer builds, which compile
# behind it, get the cores sooner. --quick keeps one object per file, for quick rebuilds in the
# developer's loop; either way a build directory keeps what it was configured with.
debug_unity=()
[ "$quick" = 1 ] || debug_unity=(-Dunity=on -Dunity_size=100)
configure build-debug -Dbuildtype=debugoptimized "${debug_info[@]}" "${debug_unity[@]}" || exit 1
phase "configure the debug build" "$started"

echo "== debug build: building what its tests need"
compile build-debug "debug build"
if [ "$quick" = 0 ]; then
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    compile_fuzz
  ) &
  fuzz_compile=$!
fi
run_tests build-debug "debug build"

if [ "$quick" = 0 ]; then
  # Each sanitizer suite starts once its build is done; the two then run side by side, their
  # output kept apart and shown in order.
  wait_built build-tsan
  run_tests build-tsan "TSan build" >"$times/tsan.out" 2>&1 &
  tsan_tests=$!
  wait_built build-asan
  run_tests build-asan "ASan+UBSan build" >"$times/asan.out" 2>&1 &
  asan_tests=$!
  wait "$background_compile" "$fuzz_compile" "$asan_tests" "$tsan_tests"
  cat "$times/asan.out" "$times/tsan.out"
fi

passed=0
failed=0
skipped=0  # the GPU test where there is no GPU; it says why in its log
for dir in "${builds[@]}"; do
  read -r ok bad skip <"$times/$dir.counts" 2>/dev/null || { ok=0; bad=1; skip=0; }
  passed=$((passed + ok))
  failed=$((failed + bad))
  skipped=$((skipped + skip))
done
if [ "$quick" = 0 ] && [ "$(cat "$times/build-debug-rest.built" 2>/dev/null)" != 0 ]; then
  tail -50 build-debug-rest.build.log
  echo "== debug build: the programs no test runs did not build (build-debug-rest.build.log)"
  failed=$((failed + 1))
fi

echo "== wall time by phase ($(($(date +%s) - run_started)) s in all; from: seconds after the start):"
while IFS='|' read -r label from to; do
  printf '   %-32s from %5d s  %5d s\n' "$label" $((from - run_started)) $((to - from))
done < <(sort -t'|' -k2,2n -k3,3n "$times/phases")
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

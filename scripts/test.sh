#!/usr/bin/env bash
# Sets up, builds and runs every test: a debug-optimized build at full test sizes, then the same
# suites under ASan+UBSan and under TSan at smaller sizes. Ends with one line "N passed, N failed"
# (meson tests over all three builds; ", N skipped" follows) and exits non-zero on any failure.
# Each test a build defines (meson test --list) counts once: a build failure counts all of them as
# failed, and so does a test without a result; only the GPU test may be skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed at the end of every run (setup, each build's compile and tests).
phases=()
phase_started=$SECONDS
phase_done() {  # name
  phases+=("$(printf '%-28s %5d s' "$1" $((SECONDS - phase_started)))")
  phase_started=$SECONDS
}
scripts/setup.sh || exit 1
source scripts/env.sh
phase_done "setup"

configure() {  # dir, meson options...
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
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

passed=0
failed=0
skipped=0  # the GPU test where there is no GPU; it says why in its log
run_suite() {  # dir, label
  local dir=$1 label=$2
  local list=$dir/meson-logs/testlist.txt log=$dir/meson-logs/testlog.json
  # A log left by the last run must not be counted again when this one writes none.
  rm -f "$log" "$list"
  echo "== $label: building"
  local built=1
  ninja -C "$dir" >"$dir.build.log" 2>&1 || built=0
  phase_done "$label: compile"
  # The tests this build defines: each must report a result, or counts as failed.
  meson test -C "$dir" --no-rebuild --list >"$list" || echo "== $label: meson test --list failed"
  local listed
  listed=$(grep -c . "$list")
  if [ "$built" = 0 ]; then
    tail -50 "$dir.build.log"
    echo "== $label: BUILD FAILED: its $listed tests did not run"
    failed=$((failed + (listed > 0 ? listed : 1)))
    return
  fi
  echo "== $label: testing $listed tests"
  cuda_tests_note "$dir" "$label" "$list"
  meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 2>&1 |
    grep -vE '^\s*$' | tail -40
  local meson_rc=${PIPESTATUS[0]}
  phase_done "$label: tests"
  local counts
  counts=$(python3 - "$list" "$log" "$meson_rc" "${may_skip[*]}" <<'PY'
import json, sys
list_path, log_path, meson_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
may_skip = set(sys.argv[4].split())
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
print(ok, bad, skip)
PY
)
  [ -n "$counts" ] || counts="0 $((listed > 0 ? listed : 1)) 0"  # the counter itself failed
  read -r ok bad skip <<<"$counts"
  passed=$((passed + ok))
  failed=$((failed + bad))
  skipped=$((skipped + skip))
}

configure build-debug -Dbuildtype=debugoptimized || exit 1
configure build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
  -Dcuda=disabled -Dtest_scale=0.25 || exit 1
configure build-tsan -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false \
  -Dcuda=disabled -Dtest_scale=0.2 || exit 1
phase_done "configure (meson setup)"

run_suite build-debug "debug build"
run_suite build-asan "ASan+UBSan build"
run_suite build-tsan "TSan build"

echo "== wall time by phase ($SECONDS s in all):"
printf '   %s\n' "${phases[@]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

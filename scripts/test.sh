#!/usr/bin/env bash
# Sets up, builds and runs every test: a debug-optimized build at full test sizes, then the same
# suites under ASan+UBSan and under TSan at smaller sizes. Ends with one line "N passed, N failed"
# (meson tests over all three builds; ", N skipped" follows) and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
source scripts/env.sh

configure() {  # dir, meson options...
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
}

passed=0
failed=0
skipped=0  # tests that cannot run here (a GPU test without a GPU) say why in their log
run_suite() {  # dir, label
  local dir=$1 label=$2
  echo "== $label: building"
  if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
    tail -50 "$dir.build.log"
    echo "== $label: BUILD FAILED"
    failed=$((failed + 1))
    return
  fi
  echo "== $label: testing"
  meson test -C "$dir" --print-errorlogs --num-processes 2 2>&1 | grep -vE '^\s*$' | tail -40
  local counts
  counts=$(python3 - "$dir/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r == "SKIP":
        skip += 1
    elif r in ("OK", "EXPECTEDFAIL"):
        ok += 1
    else:
        bad += 1
print(ok, bad, skip)
PY
)
  [ -n "$counts" ] || counts="0 1 0"  # no test log: count the run as a failure
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

run_suite build-debug "debug build"
run_suite build-asan "ASan+UBSan build"
run_suite build-tsan "TSan build"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# The HTTP API against its contract: batchd (cpu backend) and batchd-http on a free port, then
# schemathesis (pinned in python/requirements-test.txt; scripts/setup.sh puts it in .venv) runs
# every check, in every phase, against the docs/openapi.yaml the server serves at /openapi.json.
# Any answer outside the contract (an undocumented status, header, content type or body, a 5xx
# for bad input, a job that outlives its DELETE) fails the test. The daemon and front-end run
# with their default limits, which are the ones the contract states, so the coverage phase's
# boundary values (an input of 65536 and 65537 bytes, 256 and 257 inputs, 256 and 257 strings
# in a /v2 inference) meet the real limits.
# Deterministic: a fixed seed, a bounded number of examples, no example database.
set -euo pipefail
: "${BATCHD_BIN:?run through meson}" "${BATCHD_HTTP_BIN:?run through meson}" "${BATCHD_SCHEMATHESIS:?run through meson}"
: "${BATCHD_OPENAPI_YAML:?run through meson}"
[ -x "$BATCHD_SCHEMATHESIS" ] || { echo "$BATCHD_SCHEMATHESIS is missing: run scripts/setup.sh"; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
examples=${BATCHD_OPENAPI_EXAMPLES:-30}

# shellcheck source=tests/http/start_node.sh
. "$here/start_node.sh"
start_node openapi 2 --backend cpu
python=$(dirname "$BATCHD_SCHEMATHESIS")/python3
# Waits for the port file, then for /readyz (both loops attached to the daemon).
"$python" - "$dir/port" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        port = open(sys.argv[1]).read().strip()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except (OSError, ValueError):
        pass
    time.sleep(0.1)
sys.exit("batchd-http did not become ready within 30 s")
PY
base="http://127.0.0.1:$(cat "$dir/port")"

# What is served is the file: the same document, as JSON.
"$python" - "$base/openapi.json" "$BATCHD_OPENAPI_YAML" <<'PY'
import json, sys, urllib.request, yaml
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    assert r.headers.get_content_type() == "application/json", r.headers["Content-Type"]
    served = json.load(r)
with open(sys.argv[2], encoding="utf-8") as f:
    if served != yaml.safe_load(f):
        sys.exit("/openapi.json differs from " + sys.argv[2])
PY

# The /v2 operations' own number of examples (schemathesis.toml) follows a longer run's.
config=$here/schemathesis.toml
if [ -n "${BATCHD_OPENAPI_EXAMPLES:-}" ]; then
  sed "s/^generation.max-examples = .*/generation.max-examples = $examples/" "$config" >"$dir/schemathesis.toml"
  config=$dir/schemathesis.toml
fi

# Run from the temp dir: nothing schemathesis or Hypothesis writes lands in the tree.
cd "$dir"
export BATCHD_SCHEMATHESIS_HOOKS=$here/schemathesis_hooks.py
"$BATCHD_SCHEMATHESIS" --config-file "$config" run "$base/openapi.json" \
  --checks all --phases examples,coverage,fuzzing,stateful --mode all \
  --max-examples "$examples" --seed 1 --generation-database none --workers 1 \
  --request-timeout 20 --no-color --suppress-health-check too_slow
echo "openapi contract: ok"

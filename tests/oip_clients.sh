#!/usr/bin/env bash
# Triton's own clients (tritonclient, perf_analyzer: pinned in python/requirements-test.txt, in
# .venv) against this build's batchd-http /v2 or batchd-grpc: runs one of python/tests/test_oip_*.py
# with pytest from .venv. Usage: oip_clients.sh TEST_FILE [PYTEST_ARGS...]. It fails where .venv
# is missing (scripts/setup.sh makes it), never skips.
set -euo pipefail
: "${BATCHD_BIN:?run through meson}"
here=$(cd "$(dirname "$0")/.." && pwd)
python=$here/.venv/bin/python3
[ -x "$python" ] || { echo "$python is missing: run scripts/setup.sh"; exit 1; }
file=$1
shift
work=$(mktemp -d /tmp/batchd-oip-XXXXXX)
cd "$work"  # nothing pytest writes lands in the tree
trap 'rm -rf "$work"' EXIT  # not exec'd below: an exec'd shell runs no trap
PYTHONDONTWRITEBYTECODE=1 "$python" -m pytest -q -p no:cacheprovider "$here/$file" "$@"

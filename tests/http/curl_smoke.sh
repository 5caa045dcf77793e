#!/usr/bin/env bash
# Smoke check of batchd-http with curl from Debian: one answer per endpoint family, checked with
# sha256sum. Fails where curl is not installed (scripts/setup.sh installs it; exit 77, meson's
# "skipped", is kept for tests that need a GPU).
set -euo pipefail
command -v curl >/dev/null || { echo "curl is not installed (scripts/setup.sh installs it)"; exit 1; }
: "${BATCHD_BIN:?run through meson}" "${BATCHD_HTTP_BIN:?run through meson}"

# shellcheck source=tests/http/start_node.sh
. "$(dirname "$0")/start_node.sh"
start_node curl 1
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
base="http://127.0.0.1:$(cat "$dir/port")"
for _ in $(seq 100); do curl -sf "$base/readyz" >/dev/null && break; sleep 0.1; done

fail() { echo "FAIL: $*"; exit 1; }
want=$(printf 'hello curl' | sha256sum | cut -d' ' -f1)

got=$(curl -sS --fail-with-body -H 'Content-Type: application/json' -d '{"input":"hello curl"}' "$base/v1/batchstring")
[ "$got" = "{\"output\":\"$want\"}" ] || fail "JSON answer: $got"
got=$(curl -sS --fail-with-body -H 'Content-Type: text/plain' --data-binary 'hello curl' "$base/v1/batchstring")
[ "$got" = "$want" ] || fail "text answer: $got"
# Two requests over one keep-alive connection.
got=$(curl -sS -d '{"input":"hello curl"}' "$base/v1/batchstring" -: -d '{"input":"hello curl"}' "$base/v1/batchstring")
[ "$got" = "{\"output\":\"$want\"}{\"output\":\"$want\"}" ] || fail "keep-alive answers: $got"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/healthz"); [ "$code" = 200 ] || fail "healthz $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz"); [ "$code" = 200 ] || fail "readyz $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/nowhere"); [ "$code" = 404 ] || fail "404: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -d 'not json' "$base/v1/batchstring"); [ "$code" = 400 ] || fail "400: $code"
# Captured first: grep -q would exit at the first match and, under pipefail, curl's broken pipe
# would fail the check.
metrics=$(curl -sS --fail-with-body "$base/metrics")
grep -q '^batchd_http_requests_total{code="200"} [1-9]' <<<"$metrics" || fail "metrics: $(grep batchd_http_requests_total <<<"$metrics" | head -3)"
echo "curl smoke: ok"

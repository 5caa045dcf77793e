#!/usr/bin/env bash
# HTTP benchmark, run by hand: how close batchd-http comes to nginx answering a fixed body, and
# the latency batchd-http gives at a fixed rate. In one run it
#   1. installs wrk and nginx if they are missing (apt-get; nginx-light where the archive has it),
#   2. builds the release tree if needed (meson setup build-release -Dbuildtype=release -Dtests=disabled),
#   3. starts batchd (cpu backend, default policy) with batchd-http in front of it, and an nginx
#      (its own config in a temporary folder, nothing under /etc or /var) whose
#      POST /v1/batchstring returns a fixed small JSON body,
#   4. runs wrk with the same threads, connections and duration against both (POST with a JSON
#      body) and prints requests/s for each and the ratio batchd-http/nginx,
#   5. runs batchd-stress --http at a fixed rate (open loop, every answer checked) and prints
#      p50/p99/p99.9 and errors.
# Writes bench/results/http-bench.json and prints a short table.
#
# Usage: bench/http-bench.sh [BUILD_DIR]      (default build-release)
# Settings (environment): THREADS=2 CONNECTIONS=64 DURATION=10 (wrk), RATE=10000 STRESS_DURATION=30
#   (batchd-stress), HTTP_PORT=18080 NGINX_PORT=18081, WORKERS=1 (nginx worker processes and
#   batchd-http --workers alike, so the comparison stays fair), WRK_BODY=fixed|unique (unique: a
#   different input per request), BATCHD_ARGS and BATCHD_HTTP_ARGS (extra flags), BATCHD_HTTP
#   (the front-end's path; default BUILD_DIR/frontend/batchd-http), BUILD=0 (use the binaries
#   as they are: no meson, no ninja).
# Exit status: 0 when every step ran and batchd-stress saw no errors or wrong answers; 77 when
# batchd-http is not built (the nginx half still runs and is recorded); 1 otherwise.
# Both servers and the load generators share this machine's cores: compare the ratio, and read
# absolute numbers with the core count (printed) in mind.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build=${1:-build-release}
threads=${THREADS:-2}
connections=${CONNECTIONS:-64}
duration=${DURATION:-10}
rate=${RATE:-10000}
stress_duration=${STRESS_DURATION:-30}
http_port=${HTTP_PORT:-18080}
nginx_port=${NGINX_PORT:-18081}
wrk_body=${WRK_BODY:-fixed}
workers=${WORKERS:-1}
http_bin=${BATCHD_HTTP:-$build/frontend/batchd-http}
results_dir=bench/results
results=$results_dir/http-bench.json
# The answer nginx returns: SHA-256 of "hello", the same size as batchd's answers.
fixed_output=2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824

work=""
pids=()

die() { echo "http-bench: $*" >&2; exit 1; }

# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  [ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. tools --------------------------------------------------------------------------------
install_tools() {
  local missing=() sudo=""
  command -v wrk >/dev/null || missing+=(wrk)
  command -v curl >/dev/null || missing+=(curl)
  if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    # nginx-light (Debian 12) is enough for `return`; newer archives have only nginx.
    if grep -q 'Candidate: [0-9]' <<<"$(apt-cache policy nginx-light 2>/dev/null)"; then
      missing+=(nginx-light)
    else
      missing+=(nginx)
    fi
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "http-bench: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null ||
    die "could not install ${missing[*]} (apt-get install -y ${missing[*]})"
}

# ---- 2. build --------------------------------------------------------------------------------
build_tree() {
  if [ "${BUILD:-1}" = 0 ]; then
    local exe
    for exe in daemon/batchd tools/batchd-stress; do
      [ -x "$build/$exe" ] || die "$build/$exe is missing (BUILD=0 builds nothing)"
    done
    return 0
  fi
  # shellcheck source=/dev/null
  source scripts/env.sh
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dbuildtype=release -Dtests=disabled >/dev/null ||
      die "meson setup $build failed"
  fi
  local targets=(daemon/batchd tools/batchd-stress)
  # The front-end is built too when it is taken from this tree and the tree knows it (it may
  # not have been wired in yet).
  if [ -z "${BATCHD_HTTP:-}" ] &&
     grep -q '^frontend/batchd-http:' <<<"$(ninja -C "$build" -t targets all 2>/dev/null)"; then
    targets+=(frontend/batchd-http)
  fi
  ninja -C "$build" "${targets[@]}" >"$work/build.log" 2>&1 ||
    { tail -20 "$work/build.log" >&2; die "build failed (ninja -C $build ${targets[*]})"; }
}

# ---- helpers ---------------------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits until something accepts on the port, or the process (pid) has died, or 10 s passed.
wait_for_port() {  # port, pid, name, log
  local _
  for _ in $(seq 100); do
    port_busy "$1" && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  echo "http-bench: $3 did not start listening on 127.0.0.1:$1; its log:" >&2
  tail -15 "$4" >&2
  return 1
}

post() {  # url, body: prints the response body
  curl -s --max-time 5 -H 'Content-Type: application/json' --data-binary "$2" "$1"
}

# ---- 3. servers ------------------------------------------------------------------------------
write_nginx_conf() {  # -> $work/nginx/nginx.conf
  local dir=$work/nginx temp_paths="" kind
  mkdir -p "$dir"
  # Every temp folder compiled into this nginx defaults to /var/lib/nginx, which it would try
  # to create: point each one it has into the work folder instead.
  for kind in client_body proxy fastcgi uwsgi scgi; do
    if grep -q -- "--http-${kind//_/-}-temp-path" <<<"$(nginx -V 2>&1)"; then
      mkdir -p "$dir/$kind"
      temp_paths+="  ${kind}_temp_path $dir/$kind;"$'\n'
    fi
  done
  cat >"$dir/nginx.conf" <<CONF
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
$temp_paths  # nginx closes a keep-alive connection after 1000 requests by default; wrk would
  # then measure reconnects.
  keepalive_requests 1000000000;
  keepalive_timeout 75s;
  server {
    listen 127.0.0.1:$nginx_port;
    location = /v1/batchstring {
      default_type application/json;
      return 200 '{"output":"$fixed_output"}';
    }
  }
}
CONF
}

start_nginx() {
  write_nginx_conf
  nginx -t -q -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" ||
    die "nginx rejects its config: $(tail -3 "$work/nginx/error.log")"
  nginx -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' \
    >"$work/nginx/stdout.log" 2>&1 &
  pids+=($!)
  wait_for_port "$nginx_port" "$!" nginx "$work/nginx/error.log" || exit 1
}

start_batchd() {
  local sock=$work/batchd.sock _
  # shellcheck disable=SC2086  # BATCHD_ARGS is a list of flags
  "$build/daemon/batchd" --socket "$sock" --backend cpu --log-level warn ${BATCHD_ARGS:-} \
    >"$work/batchd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    [ -S "$sock" ] && break
    kill -0 "$!" 2>/dev/null || break
    sleep 0.1
  done
  [ -S "$sock" ] || { tail -10 "$work/batchd.log" >&2; die "batchd did not start"; }
  # shellcheck disable=SC2086
  "$http_bin" --listen "127.0.0.1:$http_port" --socket "$sock" --workers "$workers" \
    --log-level warn ${BATCHD_HTTP_ARGS:-} >"$work/batchd-http.log" 2>&1 &
  pids+=($!)
  wait_for_port "$http_port" "$!" batchd-http "$work/batchd-http.log" || exit 1
}

# Both must answer before being measured: a server that answers errors fast would look great.
check_answers() {
  local got
  got=$(post "http://127.0.0.1:$nginx_port/v1/batchstring" '{"input":"hello"}')
  [ "$got" = "{\"output\":\"$fixed_output\"}" ] || die "nginx answered '$got'"
  [ "$have_http" = 1 ] || return 0
  got=$(post "http://127.0.0.1:$http_port/v1/batchstring" '{"input":"hello"}')
  case "$got" in
    *"\"$fixed_output\""*) ;;
    *) die "batchd-http answered '$got' to {\"input\":\"hello\"} (expected sha256(hello))" ;;
  esac
}

# ---- 4. wrk ----------------------------------------------------------------------------------
write_wrk_script() {  # -> $work/post.lua
  cat >"$work/post.lua" <<'LUA'
-- POST /v1/batchstring with a JSON body. Fixed by default: wrk then sends one prebuilt request
-- (defining request() would make it build every request in Lua). WRK_BODY=unique gives each
-- request its own input, thread id and counter.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input":"hello"}'

local thread_count = 0
function setup(thread)
  thread:set("thread_id", thread_count)
  thread_count = thread_count + 1
end

if os.getenv("WRK_BODY") == "unique" then
  local counter = 0
  function request()
    counter = counter + 1
    return wrk.format(nil, nil, nil,
                      string.format('{"input":"wrk-%d-%d"}', thread_id or 0, counter))
  end
end

-- One JSON line for the bench script; wrk's own text report stays above it for people.
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"rps":%.1f,"non_2xx":%d,' ..
    '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%.1f,"p90":%.1f,"p99":%.1f,"p999":%.1f,"max":%.1f,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.requests / summary.duration * 1e6, e.status,
    e.connect, e.read, e.write, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
end
LUA
}

run_wrk() {  # name, port -> $work/wrk-NAME.json (or null)
  local name=$1 port=$2 line
  echo "== wrk -t$threads -c$connections -d${duration}s POST http://127.0.0.1:$port/v1/batchstring ($name, $wrk_body body)"
  WRK_BODY=$wrk_body wrk -t"$threads" -c"$connections" -d"${duration}s" --timeout 5s \
    -s "$work/post.lua" "http://127.0.0.1:$port/v1/batchstring" >"$work/wrk-$name.out" 2>&1
  grep -v '^WRKJSON ' "$work/wrk-$name.out" | sed 's/^/   /'
  line=$(grep '^WRKJSON ' "$work/wrk-$name.out" | tail -1)
  if [ -n "$line" ]; then printf '%s' "${line#WRKJSON }" >"$work/wrk-$name.json"; else printf 'null' >"$work/wrk-$name.json"; status=1; fi
}

# ---- 5. batchd-stress ------------------------------------------------------------------------
run_stress() {  # -> $work/stress.json (or null)
  local url=http://127.0.0.1:$http_port last rc
  echo "== batchd-stress --http $url --rate $rate --duration $stress_duration"
  timeout $((stress_duration + 60)) "$build/tools/batchd-stress" --http "$url" --rate "$rate" \
    --duration "$stress_duration" --json --quiet >"$work/stress.out" 2>"$work/stress.err"
  rc=$?
  head -n -1 "$work/stress.out" | sed 's/^/   /'
  sed 's/^/   /' "$work/stress.err"
  last=$(tail -n 1 "$work/stress.out")
  if [ "${last:0:1}" = "{" ]; then printf '%s' "$last" >"$work/stress.json"; else printf 'null' >"$work/stress.json"; fi
  [ "$rc" -eq 0 ] || { echo "http-bench: batchd-stress exited $rc (errors or wrong answers, see above)" >&2; status=1; }
}

# ---- results ---------------------------------------------------------------------------------
json_or_null() { if [ -s "$1" ]; then cat "$1"; else printf 'null'; fi; }
# The number after "key": in a one-line JSON text (keys used here are unique in their text).
num() { printf '%s' "$1" | grep -o "\"$2\":[-0-9.e+]*" | head -1 | cut -d: -f2; }

ratio() {  # batchd-http rps / nginx rps, or null
  local a b
  a=$(num "$(json_or_null "$work/wrk-batchd-http.json")" rps)
  b=$(num "$(json_or_null "$work/wrk-nginx.json")" rps)
  if [ -n "$a" ] && [ -n "$b" ]; then awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.4f", a / b; else printf "null" }'; else printf 'null'; fi
}

write_results() {
  mkdir -p "$results_dir"
  {
    printf '{"date":"%s","cores":%s,"build":"%s","ok":%s,\n' "$(date -u +%FT%TZ)" "$(nproc)" "$build" \
      "$([ "$status" -eq 0 ] && echo true || echo false)"
    printf ' "wrk":{"threads":%s,"connections":%s,"duration_s":%s,"body":"%s"},"workers":%s,\n' \
      "$threads" "$connections" "$duration" "$wrk_body" "$workers"
    printf ' "nginx":%s,\n "batchd_http":%s,\n "ratio_batchd_http_over_nginx":%s,\n' \
      "$(json_or_null "$work/wrk-nginx.json")" "$(json_or_null "$work/wrk-batchd-http.json")" "$(ratio)"
    printf ' "stress":{"rate":%s,"duration_s":%s,"result":%s},\n' "$rate" "$stress_duration" \
      "$(json_or_null "$work/stress.json")"
    printf ' "skipped":%s}\n' "$([ -n "$skipped" ] && printf '"%s"' "$skipped" || printf null)"
  } >"$results"
}

table_row() {  # name, wrk json
  local j=$2
  if [ "$j" = null ]; then printf '  %-12s %s\n' "$1" "not measured"; return; fi
  awk -v n="$1" -v r="$(num "$j" rps)" -v p50="$(num "$j" p50)" -v p99="$(num "$j" p99)" \
      -v bad="$(num "$j" non_2xx)" -v t="$(num "$j" timeout)" -v rd="$(num "$j" read)" \
    'BEGIN { printf "  %-12s %12.0f %10.3f %10.3f %8d %8d\n", n, r, p50 / 1000, p99 / 1000, bad, t + rd }'
}

print_table() {
  local s
  echo
  echo "http-bench: wrk -t$threads -c$connections -d${duration}s, $wrk_body body, $workers worker(s) each, $(nproc) cores"
  printf '  %-12s %12s %10s %10s %8s %8s\n' target req/s "p50 ms" "p99 ms" non-2xx "sock err"
  table_row nginx "$(json_or_null "$work/wrk-nginx.json")"
  table_row batchd-http "$(json_or_null "$work/wrk-batchd-http.json")"
  echo "  ratio batchd-http/nginx: $(ratio)"
  s=$(json_or_null "$work/stress.json")
  if [ "$s" != null ]; then
    echo "batchd-stress --http, open loop at $rate/s for ${stress_duration}s (latency from intended send time):"
    awk -v p50="$(num "$s" p50_us)" -v p99="$(num "$s" p99_us)" -v p999="$(num "$s" p999_us)" \
        -v max="$(num "$s" max_us)" -v rps="$(num "$s" rps)" \
      'BEGIN { printf "  p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us  (%.0f req/s)\n", p50, p99, p999, max, rps }'
    echo "  sent $(num "$s" sent)  ok $(num "$s" ok)  errors $(num "$s" errors)  wrong $(num "$s" wrong)"
  fi
  [ -n "$skipped" ] && echo "  skipped: $skipped"
  echo "results: $results"
}

# ---- main ------------------------------------------------------------------------------------
status=0
skipped=""
have_http=1
for port in "$http_port" "$nginx_port"; do
  port_busy "$port" && die "port $port on 127.0.0.1 is in use: free it or set HTTP_PORT / NGINX_PORT"
done
work=$(mktemp -d /tmp/http-bench.XXXXXX)
install_tools
build_tree
if [ ! -x "$http_bin" ]; then
  have_http=0
  skipped="batchd-http not built ($http_bin): only nginx was measured"
  echo "http-bench: $skipped" >&2
fi
write_wrk_script
start_nginx
[ "$have_http" = 1 ] && start_batchd
check_answers
run_wrk nginx "$nginx_port"
[ "$have_http" = 1 ] && run_wrk batchd-http "$http_port"
[ "$have_http" = 1 ] && run_stress
write_results
print_table
[ "$status" -ne 0 ] && exit 1
[ "$have_http" = 1 ] || exit 77
exit 0

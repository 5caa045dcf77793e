#!/usr/bin/env bash
# Builds a libFuzzer target with clang (the project's compiler is g++, which has no libFuzzer) and
# runs it for a bounded time from its seed corpus. Targets: http (batchd-http's request parsing
# and routing), v2 (its /v2 inference requests, JSON and binary) and segment (the daemon's reader
# of a client's shared-memory segment).
# Usage: run-fuzz.sh SOURCE_ROOT BUILD_DIR [SECONDS] [TARGET]. SECONDS is scaled by
# BATCHD_TEST_SCALE; 0 builds the binary and runs nothing (scripts/test.sh builds them ahead).
# Fails where clang++ or the libFuzzer runtime is missing (scripts/setup.sh installs both): exit
# 77, meson's "skipped", is kept for tests that need a GPU.
# BATCHD_FUZZ_DIR, where set, holds the binaries and corpora instead of BUILD_DIR/fuzz: the
# binary does not depend on the meson build it runs from (its own compiler and flags), so
# scripts/test.sh has its three builds share one, built once, each run growing one corpus.
set -euo pipefail
src=$1
out=${BATCHD_FUZZ_DIR:-$2/fuzz}
seconds=${3:-20}
target=${4:-http}
cxx=${CLANGXX:-clang++}

if ! command -v "$cxx" >/dev/null; then
  echo "$cxx not found (scripts/setup.sh installs clang)"
  exit 1
fi
mkdir -p "$out"
# Two builds' tests may run this at once over a shared BATCHD_FUZZ_DIR: one at a time per target
# (the probe, the binary and the corpus are shared).
exec {lock}>"$out/fuzz_$target.lock"
flock "$lock"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    "$cxx" -fsanitize=fuzzer -x c++ - -o "$out/probe-$target" 2>"$out/probe-$target.log"; then
  echo "no libFuzzer runtime for $cxx (scripts/setup.sh installs libclang-rt-14-dev)"
  cat "$out/probe-$target.log"
  exit 1
fi

# The routing serves /openapi.json from a source meson generates (frontend/meson.build).
openapi_cpp=${BATCHD_OPENAPI_SPEC_CPP:-$2/../../frontend/openapi_spec.cpp}
require_openapi() {
  [ -f "$openapi_cpp" ] || { echo "$openapi_cpp is missing: build the project with meson first"; exit 1; }
}

defines=()
case $target in
  http)
    require_openapi
    # The API's context names the models requests may ask for (oip/model.cpp).
    sources=("$src/tests/fuzz/fuzz_http.cpp" "$src/frontend/connection.cpp" "$src/frontend/http_api.cpp"
             "$src/frontend/http_response.cpp" "$src/text/json_escape.cpp" "$src/client_lib/priority.cpp"
             "$src/oip/model.cpp" "$openapi_cpp")
    headers=("$src"/frontend/*.hpp "$src"/text/*.hpp "$src"/oip/*.hpp "$src/client_lib/client.hpp"
             "$src/client_lib/client_segment.hpp")
    packages=(simdjson fmt)
    defines=(-DBATCHD_VERSION='"fuzz"')
    seeds=$src/tests/fuzz/corpus ;;
  v2)
    # V2Api reads X-Timeout-Ms and X-Priority with http_api's helpers, which bring the router along.
    require_openapi
    sources=("$src/tests/fuzz/fuzz_v2.cpp" "$src/frontend/v2_api.cpp" "$src/frontend/v2_infer.cpp"
             "$src/frontend/v2_trace_setting.cpp" "$src/tracing/trace_settings.cpp" "$src/frontend/http_api.cpp"
             "$src/frontend/http_response.cpp" "$src/text/json_escape.cpp" "$src/client_lib/priority.cpp"
             "$src/oip/bytes_tensor.cpp" "$src/oip/model.cpp" "$openapi_cpp")
    headers=("$src"/frontend/*.hpp "$src"/text/*.hpp "$src"/oip/*.hpp "$src/client_lib/client.hpp"
             "$src/client_lib/client_segment.hpp" "$src/tests/http/fake_api_context.hpp")
    packages=(simdjson fmt)
    defines=(-DBATCHD_VERSION='"fuzz"')
    seeds=$src/tests/fuzz/corpus-v2 ;;
  segment)
    sources=("$src/tests/fuzz/fuzz_segment.cpp" "$src/daemon/client_session.cpp" "$src/shm/layout.cpp"
             "$src/shm/memfd_region.cpp" "$src/shm/fd.cpp" "$src/shm/futex.cpp")
    headers=("$src"/shm/*.hpp "$src/daemon/client_session.hpp")
    packages=(fmt)
    seeds=$src/tests/fuzz/corpus-segment ;;
  *) echo "unknown fuzz target $target"; exit 2 ;;
esac
binary=$out/fuzz_$target
# Rebuilt only when the sources or headers it is built from changed (by content: a build folder's
# freshly generated openapi_spec.cpp is the same source).
digest=$(cat "${sources[@]}" "${headers[@]}" | sha256sum | cut -d' ' -f1)
if [ ! -x "$binary" ] || [ "$(cat "$binary.sha256" 2>/dev/null)" != "$digest" ]; then
  echo "building $binary with $cxx"
  # shellcheck disable=SC2046  # pkg-config's words are meant to split
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined "${defines[@]}" -I"$src" -isystem /usr/include/concurrentqueue \
    $(pkg-config --cflags "${packages[@]}") "${sources[@]}" $(pkg-config --libs "${packages[@]}") \
    -o "$binary.tmp"
  mv "$binary.tmp" "$binary"
  echo "$digest" >"$binary.sha256"
fi

[ "$seconds" != 0 ] || exit 0
scale=${BATCHD_TEST_SCALE:-1}
run_seconds=$(awk -v s="$seconds" -v k="$scale" 'BEGIN { t = int(s * k); print (t < 5 ? 5 : t) }')
mkdir -p "$out/corpus-$target"
# The sanitizer builds' ASAN_OPTIONS would make libFuzzer abort without its report: use its own.
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "fuzzing for $run_seconds s"
# libFuzzer's own failure exit code is 77, which meson would count as "skipped": make it 1.
"$binary" -max_total_time="$run_seconds" -error_exitcode=1 -timeout_exitcode=1 -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$out/$target-" "$out/corpus-$target" "$seeds"

#!/usr/bin/env bash
# A C program built against the INSTALLED client library, the way a user builds one: installs this
# build into a temporary root (meson install --destdir), compiles with the flags that
# `pkg-config --cflags --libs batchd-client` gives for it, and runs the program against a batchd
# started here on the cpu backend; its answer must be the SHA-256 of the input.
# The C++ header is compiled the same way: it includes what it needs of the installed tree alone.
# Usage: check_installed_client.sh MESON BUILD_ROOT BATCHD CC SANITIZE CXX
# (SANITIZE: the build's b_sanitize, so that the program links the library's sanitizer runtime.)
set -euo pipefail
meson=$1
build=$2
batchd=$3
cc=$4
sanitize=$5
cxx=$6

work=$(mktemp -d)
daemon_pid=""
cleanup() {
  # Only on a failure path (the normal path waits for the daemon and clears daemon_pid); the
  # daemon may already have died, which the check that failed has reported.
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

root=$work/root
# The library, its headers and pkg-config file (install tags devel and runtime): a sanitizer build
# builds only what its tests run, which need not be every program (batchd-grpc's tag is grpc).
"$meson" install -C "$build" --no-rebuild --quiet --tags devel,runtime --destdir "$root" >"$work/install.log" 2>&1 || {
  echo "meson install --destdir failed:"
  cat "$work/install.log"
  exit 1
}
pc=$(find "$root" -name batchd-client.pc)
if [ -z "$pc" ]; then
  echo "no batchd-client.pc was installed"
  exit 1
fi
# The .pc names the final prefix; the sysroot points its paths into the temporary root.
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs batchd-client)
echo "pkg-config --cflags --libs batchd-client: $flags"

cat >"$work/prog.c" <<'EOF'
#include <batchd_client.h>
#include <stdio.h>
#include <string.h>

#if BATCHD_CLIENT_ABI_VERSION != 1
#error "unexpected ABI version"
#endif

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  batchd_status status = BATCHD_OK;
  batchd_client* client = batchd_client_connect(argv[1], 5000, &status);
  if (client == NULL) {
    fprintf(stderr, "connect: %s\n", batchd_status_name(status));
    return 1;
  }
  char* output = NULL;
  size_t len = 0;
  status = batchd_submit(client, argv[2], strlen(argv[2]), 10000, &output, &len);
  if (status == BATCHD_OK) {
    printf("%.*s\n", (int)len, output);
  } else {
    fprintf(stderr, "submit: %s: %s\n", batchd_status_name(status), output != NULL ? output : "");
  }
  batchd_free(output);
  batchd_client_close(client);
  return status == BATCHD_OK ? 0 : 1;
}
EOF
san_flags=()
if [ "$sanitize" != none ]; then
  san_flags=("-fsanitize=$sanitize")
  # The library is C++ built with UBSan's C++ checks: clang links their runtime (which needs the
  # C++ ABI library) into a C program only when asked; g++'s libubsan is one library.
  if $cc --version 2>/dev/null | grep -q clang; then san_flags+=(-fsanitize-link-c++-runtime -lstdc++); fi
fi
# No -I into the source tree: only what pkg-config says. ($cc may be a command with arguments.)
# shellcheck disable=SC2086
$cc "${san_flags[@]}" -o "$work/prog" "$work/prog.c" $flags

# The C++ API as installed: client.hpp and the status snapshot it includes (status/).
cat >"$work/prog.cpp" <<'EOF'
#include <client.hpp>

int main() {
  batchd::DaemonStatus status;
  return static_cast<int>(status.models.size() + status.requests_taken_by_class.size()) - 3;
}
EOF
# shellcheck disable=SC2046,SC2086
$cxx -std=c++20 -fsyntax-only $(pkg-config --cflags batchd-client) "$work/prog.cpp"

socket=$work/batchd.sock
"$batchd" --socket "$socket" --backend cpu --max-wait-ms 0 --log-level warn &
daemon_pid=$!
for _ in $(seq 100); do
  [ -S "$socket" ] && break
  sleep 0.1
done
input="hello from an installed client"
libdir=$(dirname "$(find "$root" -name 'libbatchd-client.so' | head -1)")
if ! answer=$(LD_LIBRARY_PATH=$libdir "$work/prog" "$socket" "$input"); then
  echo "the installed client's program failed"
  exit 1
fi
expected=$(printf '%s' "$input" | sha256sum | cut -d' ' -f1)
kill -TERM "$daemon_pid"
status=0
wait "$daemon_pid" || status=$?
daemon_pid=""
if [ "$answer" != "$expected" ]; then
  echo "wrong answer: '$answer', expected '$expected'"
  exit 1
fi
echo "answer: $answer (the SHA-256 of the input)"
if [ "$status" -ne 0 ]; then
  echo "batchd exited with status $status on SIGTERM"
  exit 1
fi

#!/usr/bin/env bash
# Installs every Debian package batchd needs to build and test (Debian 12). Idempotent: packages
# already present are not touched, so a set-up machine costs one dpkg query. Arguments name more
# packages to install the same way (bench/run-all.sh passes what the benchmarks need).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  meson ninja-build g++ pkg-config
  libboost1.81-dev liburing-dev doctest-dev libconcurrentqueue-dev libssl-dev
  libcli11-dev libfmt-dev libspdlog-dev libsimdjson-dev libxxhash-dev libtomlplusplus-dev libsystemd-dev
  libhiredis-dev redis-server
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # batchd-grpc
  opentelemetry-cpp-dev  # tracing (from bookworm-backports: apt_add_backports)
  libasan8 libubsan1 libtsan2
  curl clang libclang-rt-14-dev systemd
  haproxy prometheus libncurses-dev tmux
  python3-venv python3-dev python3-yaml
  libb64-0d  # perf_analyzer (tritonclient's wheel, in .venv) links libb64.so.0d
  "$@"
)

# shellcheck source=scripts/apt.sh
. scripts/apt.sh
apt_add_backports
apt_install_missing setup "${packages[@]}"

# The project's Python environment; scripts/test.sh runs it by itself (SETUP_SKIP_VENV=1 here),
# beside the builds that do not need it.
[ "${SETUP_SKIP_VENV:-0}" = 1 ] || scripts/setup_venv.sh

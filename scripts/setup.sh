#!/usr/bin/env bash
# Installs every Debian package batchd needs to build and test (Debian 12). Idempotent: packages
# already present are not touched, so a set-up machine costs one dpkg query. Arguments name more
# packages to install the same way (bench/run-all.sh passes what the benchmarks need).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  meson ninja-build g++ pkg-config
  libboost1.81-dev liburing-dev doctest-dev libconcurrentqueue-dev libssl-dev
  libcli11-dev libfmt-dev libspdlog-dev libsimdjson-dev libtomlplusplus-dev libsystemd-dev
  libhiredis-dev redis-server
  libasan8 libubsan1 libtsan2
  curl clang libclang-rt-14-dev systemd
  haproxy prometheus libncurses-dev tmux
  python3-venv python3-dev python3-yaml
  "$@"
)

# shellcheck source=scripts/apt.sh
. scripts/apt.sh
apt_install_missing setup "${packages[@]}"

# The project's Python environment (.venv, git-ignored): what the Python package's build and the
# tests written in Python need from PyPI, pinned in python/requirements-test.txt. Debian's own
# python3, not whatever python3 comes first on PATH. Rebuilt only when the pins change.
requirements=python/requirements-test.txt
stamp=.venv/requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing $requirements into .venv"
  rm -rf .venv
  /usr/bin/python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
  echo "$want" >"$stamp"
fi

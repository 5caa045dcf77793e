#!/usr/bin/env bash
# Makes the project's Python environment (.venv, git-ignored) if its pins changed: what the Python
# package's build and the tests written in Python need from PyPI, pinned in
# python/requirements-test.txt, on Debian's own python3 (scripts/setup.sh installs python3-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

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

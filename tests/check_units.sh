#!/usr/bin/env bash
# Checks systemd units as systemd itself reads them: `systemd-analyze verify`, and the exposure
# score of `systemd-analyze security --offline=yes` (each must stay <= 2.5). The units are the ones
# meson configured (so they say what gets installed), with the installed binaries' directory
# pointed at the build's. A template (NAME@.service) is checked as its instance NAME@0.service.
# Usage: check_units.sh INSTALL_BINDIR UNIT=BUILD_BINARY_DIR...
set -uo pipefail
install_bindir=$1
shift
# Not a skip (77 is kept for "no GPU here"): scripts/setup.sh installs systemd.
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze is not installed (scripts/setup.sh installs systemd)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for pair in "$@"; do
  unit=${pair%%=*}
  bindir=${pair#*=}
  file=$(basename "$unit")
  sed "s|$install_bindir/|$bindir/|g" "$unit" >"$work/$file"
  name=${file/@./@0.}
  if ! out=$(systemd-analyze verify "$work/$name" 2>&1) || [ -n "$out" ]; then
    echo "systemd-analyze verify $name:"
    echo "$out"
    failed=1
    continue
  fi
  echo "verify $name: clean"
  score=$(systemd-analyze security --offline=yes "$work/$name" 2>&1 |
    sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  if [ -z "$score" ]; then
    echo "could not read the exposure score of $name"
    failed=1
    continue
  fi
  echo "exposure of $name: $score (aim <= 2.5)"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || failed=1
done
exit $failed

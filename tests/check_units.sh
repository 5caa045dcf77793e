#!/usr/bin/env bash
# Checks the systemd units as systemd itself reads them: `systemd-analyze verify`, and the
# exposure score of `systemd-analyze security --offline=yes` (batchd.service must stay <= 2.5).
# Usage: check_units.sh UNIT.in DAEMON_BINARY_DIR
set -uo pipefail
unit_in=$1
bindir=$2
# Not a skip (77 is kept for "no GPU here"): scripts/setup.sh installs systemd.
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze is not installed (scripts/setup.sh installs systemd)"
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=$(basename "$unit_in" .in)
# The installed unit points at the installed binary; here it points at the one just built.
sed "s|@BINDIR@|$bindir|g; s|@DOCDIR@|/usr/share/doc/batchd|g; s|@SYSCONFDIR@|/etc|g" \
  "$unit_in" >"$work/$name"
if ! out=$(systemd-analyze verify "$work/$name" 2>&1) || [ -n "$out" ]; then
  echo "systemd-analyze verify $name:"
  echo "$out"
  exit 1
fi
echo "verify $name: clean"
score=$(systemd-analyze security --offline=yes "$work/$name" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -z "$score" ]; then
  echo "could not read the exposure score of $name"
  exit 1
fi
echo "exposure of $name: $score (aim <= 2.5)"
awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }'

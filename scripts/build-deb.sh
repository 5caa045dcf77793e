#!/usr/bin/env bash
# Builds the Debian packages from debian/ (batchd, libbatchd-client0, libbatchd-client-dev) out
# of tree, checks them with lintian, unpacks them into an empty root and checks what they ship
# against debian/expected-files.txt, then prints name, version and size of each.
#
#   scripts/build-deb.sh [OUTDIR]     # the .debs, .changes and .buildinfo land in OUTDIR
#                                     # (default build-deb/)
#
# The tree built is the working tree as git sees it (tracked files and untracked ones git does not
# ignore), copied to a temporary directory, so the build leaves the checkout clean. Environment
# passed through: DEB_BUILD_OPTIONS (nocheck, parallel=N, ...) and DEB_BUILD_PROFILES
# (pkg.batchd.cuda builds the CUDA backend where the toolkit is installed). Installs the
# packaging tools and the Build-Depends it misses through apt-get (needs root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$(realpath -m "${1:-build-deb}")

# shellcheck source=scripts/apt.sh
. scripts/apt.sh
apt_add_backports  # opentelemetry-cpp-dev, a Build-Depends
apt_install_missing build-deb dpkg-dev debhelper lintian fakeroot

# The changelog's version is the package's: it must be meson's project version.
meson_version=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" meson.build | head -1)
deb_version=$(dpkg-parsechangelog -SVersion)
if [ "${deb_version%%-*}" != "$meson_version" ]; then
  echo "build-deb: debian/changelog says $deb_version, meson.build says $meson_version" >&2
  exit 1
fi

# The build tree is removed when everything passed, and kept for a look (and its path said) when
# something failed.
work=$(mktemp -d /tmp/batchd-deb.XXXXXX)
trap 'if [ $? -eq 0 ]; then rm -rf "$work"; else echo "build-deb: build tree kept in $work" >&2; fi' EXIT
src=$work/batchd-$meson_version
mkdir "$src"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$src"

cd "$src"
if ! dpkg-checkbuilddeps 2>/dev/null; then
  echo "build-deb: installing the Build-Depends"
  $apt_sudo apt-get update -qq
  apt_get build-dep "$src"
fi

echo "build-deb: dpkg-buildpackage -us -uc -b in $src"
dpkg-buildpackage -us -uc -b -Jauto >"$work/build.log" 2>&1 || {
  tail -n 60 "$work/build.log"
  echo "build-deb: dpkg-buildpackage failed" >&2
  exit 1
}
mkdir -p "$out"
cd "$work"
changes=$(ls batchd_*.changes)
debs=$(sed -n 's/^ [0-9a-f]\{32\} [0-9]* [^ ]* [^ ]* \(.*\.deb\)$/\1/p' "$changes")
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
cp $debs "$changes" batchd_*.buildinfo build.log "$out"/
cd "$out"

echo "== lintian $changes"
lintian_out=$(lintian --display-info "$changes" 2>&1) || true
echo "${lintian_out:-(no tags)}"
errors=$(grep '^E: ' <<<"$lintian_out" || true)
if [ -n "$errors" ]; then
  echo "build-deb: lintian errors:" >&2
  echo "$errors" >&2
  exit 1
fi

# What each package ships, unpacked with dpkg-deb -x (no dpkg database, no maintainer scripts).
echo "== files"
root=$work/root
mkdir -p "$root"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
for deb in $debs; do
  pkg=$(dpkg-deb -f "$deb" Package)
  # The debug symbols are named by build id, which changes with every compiler and flag.
  case $pkg in *-dbgsym) continue ;; esac
  dpkg-deb -x "$deb" "$root/$pkg"
  (cd "$root/$pkg" && find . ! -type d | sed "s|^\.|$pkg |")
done | sed "s|/$multiarch/|/@MULTIARCH@/|" | LC_ALL=C sort >"$work/files.txt"
if ! diff -u "$repo/debian/expected-files.txt" "$work/files.txt"; then
  echo "build-deb: the packages' files differ from debian/expected-files.txt (- expected, + built)" >&2
  exit 1
fi
echo "the files match debian/expected-files.txt ($(wc -l <"$work/files.txt") files)"

fail() { echo "build-deb: $*" >&2; exit 1; }
batchd_deb=$(grep '^batchd_' <<<"$debs")
dpkg-deb --ctrl-tarfile "$batchd_deb" | tar -xOf - ./conffiles | grep -qx /etc/batchd/batchd.toml ||
  fail "/etc/batchd/batchd.toml is not a conffile of batchd"
# The tools link the client library: batchd must depend on the package that has it.
if readelf -d "$root/batchd/usr/bin/batchctl" | grep -q 'NEEDED.*libbatchd-client\.so\.0'; then
  depends=$(dpkg-deb -f "$batchd_deb" Depends)
  grep -q 'libbatchd-client0 (>= ' <<<"$depends" || fail "batchd's Depends lack libbatchd-client0: $depends"
  echo "batchd Depends: $depends"
fi
# Each unit starts a program the package ships.
for unit in "$root"/batchd/lib/systemd/system/*.service; do
  exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
  [ -x "$root/batchd$exe" ] || fail "$(basename "$unit"): ExecStart=$exe is not in the package"
done
# The postinst creates the user before it starts the daemon that runs as it.
postinst=$(dpkg-deb --ctrl-tarfile "$batchd_deb" | tar -xOf - ./postinst)
sysusers_line=$(grep -n 'systemd-sysusers' <<<"$postinst" | head -1 | cut -d: -f1)
start_line=$(grep -n "deb-systemd-invoke .*'batchd.service'" <<<"$postinst" | head -1 | cut -d: -f1)
[ -n "$sysusers_line" ] && [ -n "$start_line" ] && [ "$sysusers_line" -lt "$start_line" ] ||
  fail "batchd's postinst does not run systemd-sysusers before it starts batchd.service"

echo "== packages (in $out)"
for deb in $debs; do
  printf '%-24s %-10s %8s KiB .deb %8s KiB installed\n' "$(dpkg-deb -f "$deb" Package)" \
    "$(dpkg-deb -f "$deb" Version)" "$(($(stat -c %s "$deb") / 1024))" \
    "$(dpkg-deb -f "$deb" Installed-Size)"
done

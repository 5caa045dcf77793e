# Sourced by scripts/setup.sh and scripts/build-deb.sh: installs Debian packages through apt-get,
# as root or through sudo. Packages already installed are not touched, so a set-up machine costs
# one dpkg query each and no apt-get run.
# shellcheck shell=bash

apt_sudo=""
if [ "$(id -u)" -ne 0 ]; then apt_sudo="sudo"; fi

# sudo resets the environment, so DEBIAN_FRONTEND goes through env to reach apt-get.
apt_get() {  # apt-get command and arguments
  $apt_sudo env DEBIAN_FRONTEND=noninteractive apt-get "$@" -y -qq --no-install-recommends >/dev/null
}

# Debian's bookworm-backports suite, where opentelemetry-cpp-dev comes from (tracing: its stable
# suite has none). Added once; apt_install_missing's update then reads it.
apt_add_backports() {
  local list=/etc/apt/sources.list.d/bookworm-backports.sources
  if [ -e "$list" ] || grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d; then return; fi
  printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bookworm-backports" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" | $apt_sudo tee "$list" >/dev/null
}

apt_install_missing() {  # who asks (for the message), packages...
  local who=$1 p
  shift
  local missing=()
  for p in "$@"; do
    if ! grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
      missing+=("$p")
    fi
  done
  if ((${#missing[@]})); then
    echo "$who: installing ${missing[*]}"
    $apt_sudo apt-get update -qq
    apt_get install "${missing[@]}"
  fi
}

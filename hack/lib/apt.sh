# Installing Debian packages for the project's scripts. Source it; needs
# bash and set -euo pipefail in the caller.

# The first line of the policy-rc.d the project writes: how a later run
# knows a leftover one (its writer was killed) is the project's to remove.
APT_POLICY_MARK='# critlet: refuse service starts while the project installs packages'

# apt::install TAG PACKAGE...: installs the packages and leaves the host's
# services as they were: their maintainer scripts start nothing (the project
# runs its own instances), and services they enable for the next boot are
# disabled again. Says what it does under TAG.
apt::install() {
  local tag=$1
  shift
  if [[ $(id -u) -ne 0 ]]; then
    echo "$tag: need root to install: $*" >&2
    return 1
  fi
  echo "$tag: installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || { echo "$tag: apt-get update failed" >&2; return 1; }

  local policy=/usr/sbin/policy-rc.d
  if [[ -e $policy && $(head -n 2 "$policy" | tail -n 1) == "$APT_POLICY_MARK" ]]; then
    echo "$tag: removing $policy left by an interrupted earlier install" >&2
    rm -f "$policy"
  fi
  if [[ ! -e $policy ]]; then
    # Never leave the host refusing all service starts: removed on exit,
    # on INT and TERM, and by the next run after a SIGKILL (the mark).
    trap 'rm -f "'"$policy"'"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    printf '#!/bin/sh\n%s\nexit 101\n' "$APT_POLICY_MARK" >"$policy"
    chmod +x "$policy"
  fi

  local before
  before=$(apt::enabled_units)
  apt-get install -y -qq --no-install-recommends "$@" || { echo "$tag: apt-get install $* failed" >&2; return 1; }
  local unit
  for unit in $(comm -13 <(echo "$before") <(apt::enabled_units)); do
    echo "$tag: disabling $unit, which the install enabled for the next boot" >&2
    # The package's later upgrades see it disabled (deb-systemd-helper's
    # was-enabled) and keep it so.
    systemctl --no-reload disable "$unit" || return 1
  done
}

# apt::enabled_units: the units enabled under /etc/systemd/system, sorted.
apt::enabled_units() {
  find /etc/systemd/system -mindepth 2 -maxdepth 2 \( -path '*.wants/*' -o -path '*.requires/*' \) -printf '%f\n' 2>/dev/null | sort -u
}

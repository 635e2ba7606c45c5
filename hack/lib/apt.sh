# Installing Debian packages for the project's scripts. Source it; needs
# bash and set -euo pipefail in the caller.

# apt::install TAG PACKAGE...: installs the packages, refusing the services
# their maintainer scripts would start (the project runs its own instances),
# and says what it does under TAG.
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
  if [[ ! -e $policy ]]; then
    # Never leave the host refusing all service starts, even when interrupted.
    trap 'rm -f "'"$policy"'"' EXIT
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
  fi
  apt-get install -y -qq --no-install-recommends "$@" || { echo "$tag: apt-get install $* failed" >&2; return 1; }
}

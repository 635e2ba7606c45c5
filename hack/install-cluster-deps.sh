#!/usr/bin/env bash
# Installs what the cluster's machines are made with, from Debian's
# packages: systemd-nspawn (systemd-container, of the exact version of the
# host's libsystemd-shared, which it links against: a newer candidate would
# pull a newer systemd onto the host), mmdebstrap (the machines' root),
# busybox-static (the workload image), and util-linux, iproute2 and procps
# for the machines' network namespaces. Does nothing when all are present
# (critlet-cluster up checks for each, internal/cluster/preflight.go).
set -euo pipefail

need=()
if ! command -v systemd-nspawn >/dev/null; then
  shared=$(dpkg-query -W -f='${Version}' libsystemd-shared 2>/dev/null || true)
  if [[ -n $shared ]]; then
    need+=("systemd-container=$shared")
  else
    need+=(systemd-container)
  fi
fi
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [[ ! -x /bin/busybox || $(LC_ALL=C ldd /bin/busybox 2>&1 || true) != *'not a dynamic'* ]]; then
  need+=(busybox-static)
fi
command -v unshare >/dev/null && command -v nsenter >/dev/null || need+=(util-linux)
command -v ip >/dev/null || need+=(iproute2)
command -v sysctl >/dev/null || need+=(procps)
((${#need[@]})) || exit 0
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt::install install-cluster-deps "${need[@]}"

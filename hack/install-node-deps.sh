#!/usr/bin/env bash
# Installs what the local node runs that is not built from Go modules:
# containerd, runc, the CNI plugins and a static busybox for the test image,
# from Debian's packages. Does nothing when all are present.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || need+=(containernetworking-plugins)
# The test image needs a static busybox: the image has no libc.
if [[ ! -x /bin/busybox || $(LC_ALL=C ldd /bin/busybox 2>&1 || true) != *'not a dynamic'* ]]; then
  need+=(busybox-static)
fi
command -v unshare >/dev/null && command -v nsenter >/dev/null || need+=(util-linux)
command -v mount >/dev/null && command -v umount >/dev/null || need+=(mount)
command -v ip >/dev/null || need+=(iproute2)
if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
apt::install install-node-deps "${need[@]}"

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
if [[ $(id -u) -ne 0 ]]; then
  echo "install-node-deps: need root to install: ${need[*]}" >&2
  exit 1
fi
echo "install-node-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || { echo "install-node-deps: apt-get update failed" >&2; exit 1; }
# The packages' maintainer scripts may try to start containerd; the node
# runs its own instance, so starting services is refused here.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  # Never leave the host refusing all service starts, even when interrupted.
  trap 'rm -f "$policy"' EXIT
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
fi
status=0
apt-get install -y -qq --no-install-recommends "${need[@]}" || status=$?
if [[ $status -ne 0 ]]; then
  echo "install-node-deps: apt-get install ${need[*]} failed" >&2
  exit 1
fi
